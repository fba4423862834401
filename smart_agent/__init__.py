"""The user-side smart agent: watches logs and job history, forecasts demand, pre-warms GPUs."""
