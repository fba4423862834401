"""Review of the prediction log: filters, scores per predictor and week, export, HTML report.

Reads the log only (read-only connection) and never imports litellm: `jitgpu predictions`
starts fast on a laptop.
"""
