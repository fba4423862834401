"""One router per resource; each handler parses, calls one service and maps the result."""
