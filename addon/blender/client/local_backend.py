"""The backend process this Blender starts on the user's machine (*Start Local
Backend*, ``painted-skin restyle`` with a local URL): launch, wait for PING, relaunch
when it died under a running shot, stop.

One :class:`LocalBackend` per Blender (:data:`LOCAL`); the module-level functions are
thin wrappers over it for the operators, the CLI and the demo. The child runs
``<python> -m painted_skin.backend serve`` by module name, never by importing the
backend here, with this scene's trained skin model added to the registry it serves.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bpy

from ...core.backend.probe import no_python_message
from ...core.backend.skin_registry import (
    REGISTRY_ENV,
    RegistryError,
    registry_entries,
    registry_text,
)
from ...core.files.atomic import write_text_atomic
from .backend_client import DEFAULT_URL, BackendClient, BackendError, BackendUnavailable

# The skin-model registry the backend reads when REGISTRY_ENV is unset.
EMBEDDED_REGISTRY = Path(__file__).resolve().parents[3] / "backend" / "skin" / "registry.toml"


def _has_own_package(python: str) -> bool:
    """Whether ``python`` imports a ``painted_skin`` of its own (pip or editable install:
    then it runs that one, with its backend extras, rather than the extension's files)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        proc = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(0 if "
                               "importlib.util.find_spec('painted_skin') else 3)"],
                              env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _scene_models() -> dict[str, str]:
    try:
        from ..skin.ui import scene_models

        return scene_models()
    except (AttributeError, ImportError):  # no scene (bpy module before a file is open)
        return {}


def _registry_models(base: str) -> list[tuple[str, str]]:
    """(name, resolved folder) of the registry file ``base``, up to its first bad entry
    (none when it is unreadable: the backend then says so itself, for its own)."""
    out: list[tuple[str, str]] = []
    try:
        for name, folder in registry_entries(base):
            out.append((name, str(folder)))
    except RegistryError:
        pass
    return out


def backend_python(configured: str) -> str:
    """The Python that runs the local backend: the preference, or, in the bpy module
    (a venv's Python runs Blender), that Python. Blender's own Python has neither torch
    nor the bundled wheels on a child's path, so a Blender with no preference set gets
    a BackendError saying how to set one, before anything starts."""
    if configured:
        return bpy.path.abspath(configured)
    if not bpy.app.binary_path:
        return sys.executable
    raise BackendError("no_python", no_python_message())


def _bind_url(url: str) -> str:
    return url.replace("localhost", "127.0.0.1")


class LocalBackend:
    """One backend child process and what relaunching it needs (its Python, URL and
    command), its log file, and the registry file written for it (removed on stop)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.log: Path | None = None
        self.python: str | None = None
        self.command: list[str] | None = None
        self.registry: Path | None = None
        self.models: dict[str, str] | None = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def registry_with(self, models: dict[str, str]) -> Path:
        """A skin-model registry for the child: the one it would read (``$``
        :data:`REGISTRY_ENV` or the embedded one) plus ``models``, written atomically to
        this process's own file, which :meth:`stop` removes."""
        base = os.environ.get(REGISTRY_ENV) or str(EMBEDDED_REGISTRY)
        lines = _registry_models(base)
        lines += [(n, str(Path(f).resolve())) for n, f in models.items()]
        path = Path(tempfile.gettempdir()) / f"painted-skin-models-{os.getpid()}.toml"
        write_text_atomic(path, registry_text(lines))
        self.registry = path
        return path

    def env(self, python: str | None = None, models: dict[str, str] | None = None
            ) -> dict[str, str]:
        """The child's environment: inside an extension (bl_ext.<repo>.painted_skin) its
        folder is named painted_skin, so its parent on PYTHONPATH makes `-m painted_skin`
        import these very files, unless ``python`` has a painted_skin installed (the
        editable install needs nothing). ``models``: the scene's skin models to serve
        (None: read from the scene now, which only Blender's main thread may do)."""
        env = dict(os.environ)
        models = _scene_models() if models is None else models
        if models:  # the registry the backend serves: its own plus this scene's model
            env[REGISTRY_ENV] = str(self.registry_with(models))
        root = Path(__file__).resolve().parents[3]
        if root.name == "painted_skin" and not (python and _has_own_package(python)):
            # Last: a checkout on the user's PYTHONPATH (with the whole backend) wins over
            # the extension's copy, which carries only the echo pipeline's part of it.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"),
                                                             str(root.parent)) if p)
        return env

    def launch(self, python: str, url: str, command: list[str] | None = None,
               models: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``<python> -m painted_skin.backend serve --bind URL`` (the
        handler behind ``painted-skin serve``, without the rest of the CLI) and return
        at once; its output goes to a log file named in error messages."""
        python = python or sys.executable
        if not command and not os.path.isfile(python):
            raise BackendError("no_python", f"Backend Python {python!r} does not exist: set "
                                            "Preferences > Add-ons > Painted Skin > Backend "
                                            "Python to the python of an environment with "
                                            "painted-skin[backend] installed")
        cmd = command or [python, "-m", "painted_skin.backend", "serve",
                          "--bind", _bind_url(url)]
        tail = re.sub(r"[^\w.-]", "_", url.rsplit(":", 1)[-1])  # a port, or an ipc:// path
        log = Path(tempfile.gettempdir()) / f"painted-skin-backend-{tail}.log"
        with open(log, "ab") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                    env=self.env(None if command else python, models),
                                    stdin=subprocess.DEVNULL)
        self.proc, self.url, self.log, self.python, self.command = proc, url, log, python, \
            command
        self.models = models
        return proc

    def start(self, python: str, url: str = DEFAULT_URL, timeout_s: float = 60.0,
              command: list[str] | None = None, models: dict[str, str] | None = None
              ) -> dict:
        """Launch the backend and wait until it answers PING; returns the PONG.
        Raises BackendError saying why (exited early, with its log; or no answer).
        ``models``: as :meth:`env` (given, this may run off the main thread)."""
        self.stop()
        proc = self.launch(python, url, command, models)
        deadline = time.monotonic() + timeout_s
        with BackendClient(url, timeout_s=1.0) as c:
            while True:
                if proc.poll() is not None:
                    raise BackendError("exited", self.exit_message(proc))
                try:
                    return c.ping(timeout_s=min(1.0, max(0.1, deadline - time.monotonic())))
                except BackendUnavailable:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise BackendError("timeout", f"the backend did not answer within "
                                                      f"{timeout_s:.0f} s; log: {self.log}"
                                           ) from None

    def log_tail(self, n: int = 2000) -> str:
        if not self.log or not Path(self.log).exists():
            return ""
        return Path(self.log).read_text(errors="replace")[-n:]

    def exit_message(self, proc: subprocess.Popen) -> str:
        """Why the backend died: its command, its exit code and its log's last lines
        (a missing package, a port in use...)."""
        return (f"the backend exited with code {proc.returncode} "
                f"({' '.join(map(str, proc.args))}); log {self.log}:\n{self.log_tail()}")

    def restart_if_dead(self) -> None:
        """``on_dead`` hook: relaunch the backend we started if it has exited (the
        client's reconnection then finds it); other backends are left alone."""
        if self.proc is not None and self.proc.poll() is not None:
            self.launch(self.python, self.url, self.command, self.models)

    def stop(self) -> None:
        """Stop the child (terminate, then kill after 5 s) and remove its registry file."""
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        self.forget_registry()

    def forget_registry(self) -> None:
        """Remove the registry file unless a child still reads it (at exit: a backend
        left running keeps serving its models)."""
        if self.registry is not None and not self.running():
            self.registry.unlink(missing_ok=True)
            self.registry = None


LOCAL = LocalBackend()
atexit.register(LOCAL.forget_registry)


def launch_local_backend(python: str, url: str, command: list[str] | None = None
                         ) -> subprocess.Popen:
    """:meth:`LocalBackend.launch` of :data:`LOCAL`."""
    return LOCAL.launch(python, url, command)


def start_local_backend(python: str, url: str = DEFAULT_URL, timeout_s: float = 60.0,
                        command: list[str] | None = None,
                        models: dict[str, str] | None = None) -> dict:
    """:meth:`LocalBackend.start` of :data:`LOCAL`."""
    return LOCAL.start(python, url, timeout_s, command, models)


def restart_local_if_dead() -> None:
    """:meth:`LocalBackend.restart_if_dead` of :data:`LOCAL` (the client's ``on_dead``)."""
    LOCAL.restart_if_dead()


def stop_local_backend() -> None:
    """:meth:`LocalBackend.stop` of :data:`LOCAL`."""
    LOCAL.stop()


def exit_message(proc: subprocess.Popen) -> str:
    """:meth:`LocalBackend.exit_message` of :data:`LOCAL`."""
    return LOCAL.exit_message(proc)


def backend_env(python: str | None = None) -> dict[str, str]:
    """:meth:`LocalBackend.env` of :data:`LOCAL`."""
    return LOCAL.env(python)
