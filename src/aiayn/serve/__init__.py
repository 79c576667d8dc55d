"""Serving a model directory over HTTP (`aiayn serve`; the optional `serve` extra: FastAPI + uvicorn)."""
