"""Forecasting GPU demand: statistical predictors, the LLM predictor, ensembles, scoring."""
