"""FastAPI application: thin routers that call services, auth dependencies, error mapping."""
