"""The backend client: one ZeroMQ session streaming a shot's frames (``backend_client``)
over a Lazy Pirate connection (``connection``), the shared-memory ring (``shm``),
per-frame bookkeeping (``shot``), CurveZMQ keys (``keys``), what it raises (``errors``),
and the backend process this Blender starts (``local_backend``). No bpy outside
``local_backend``'s callers; may import ``core`` and ``wire``, never the ``backend``
package (it starts one by module name)."""
