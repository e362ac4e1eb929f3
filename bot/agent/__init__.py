"""The turn loop: model ⇄ tools, injections, yield strategies. It knows no Slack."""
