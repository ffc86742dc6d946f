"""The Restyle step in Blender: the headless loop that streams a shot's passes to a backend
and writes its frames (``loop``), the output folder's layout and rules (``output``), the
shot's settings (``settings``), the panel with its live Backend section (``panel``,
``backend_status``), operators (``ui``), the Results section and viewer (``results_ui``,
``viewer``), and what shows when the network layer cannot load (``unavailable``). May
import bpy, ``core``, ``wire`` and the rooms beside it."""
