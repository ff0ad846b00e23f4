"""The Slack edge: the Bolt app, its listeners and middleware, the outbox thread and the HTTP server.

Laid out the way Bolt's own samples are: ``app`` builds the Bolt app and wires
everything; ``listeners/`` holds one module per concern (``commands``,
``gate_actions``, ``home``, ``errors``), each with ``register(app, deps)``;
``middleware/`` holds one middleware per file; ``outbox`` is the delivery
thread, ``home_cache`` the App Homes this replica keeps current, ``http`` the
WSGI routes and server. Every listener acknowledges at once and hands on a typed
job (``job``, ``intake``), which its handler (``handlers``) runs without Bolt: in
the worker process under ``kimi-ops serve``, on a bounded pool here otherwise.
"""
