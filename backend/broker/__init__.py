"""``painted-skin broker``: many backend workers behind one client address (``service``),
its records (``state``), and the worker side a backend runs to join one
(``worker_link``: READY, heartbeat, reconnect). May import the backend's own modules,
``core`` and ``wire``."""
