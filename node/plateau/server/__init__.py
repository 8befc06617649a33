"""The node's HTTP service: plateau's wire contract plus admin, health and metrics routes.

``create_app`` (in ``app``) builds the ASGI app around an open ``Engine``;
``run.run_node`` is what ``plateau node`` calls.
"""
