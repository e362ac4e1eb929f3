"""What an operator watches: Prometheus metrics (`metrics`), OpenTelemetry spans (`tracing`), and the engine's
reports into both (`agent`).

None of them knows Slack: the edges and the engine report into these modules through a few calls, so a
scrape or a trace shows the same figures whichever edge runs.
"""
