"""What an operator watches: Prometheus metrics (`metrics`) and OpenTelemetry spans (`tracing`).

Neither knows Slack or the engine: both report into these modules through a few calls, so a scrape or
a trace shows the same figures whichever edge runs.
"""
