"""The Restyle step in Blender's UI: the operators that restyle the shot and connect,
start and stop a local backend, and the registration of the whole step (settings in
:mod:`.settings`, panel in :mod:`.panel`, results in :mod:`.results_ui`,
the live backend status in :mod:`.backend_status`).

In the UI a modal operator polls the backend client on an event timer (progress in the
status bar, Esc cancels) and shows the result as an image sequence; headless (``blender
-b``, the bpy module: timers never fire) the same operators run the blocking loop of
:mod:`.loop`.
"""

from __future__ import annotations

import time

import bpy
from bpy.props import FloatProperty, IntProperty, StringProperty

from ...core.backend.status import BackendStatus, parse_status
from ..classes import register_classes, unregister_classes
from ..client.backend_client import BackendClient, BackendError, BackendUnavailable, Result
from ..client.local_backend import (
    LOCAL,
    backend_python,
    exit_message,
    launch_local_backend,
    restart_local_if_dead,
    start_local_backend,
    stop_local_backend,
)
from ..out_paths import UnwritableOutput
from ..passes.geometry import ShotError
from ..preferences import preferences
from .backend_status import LINE, LIVE, ensure_timer, show_failure, stop_timer
from .loop import (
    CarrySource,
    pipeline_options,
    restyle_shot,
    shot_frames,
    shot_options,
    wire_passes,
    write_result,
)
from .output import RESTYLED, check_model, check_settings, frame_done, shot_settings
from .panel import CLASSES as PANEL_CLASSES
from .panel import ActiveRun
from .request import RequestError
from .results_ui import CLASSES as RESULT_CLASSES
from .settings import (
    PS_RestyleReference,
    PS_RestyleSettings,
    backend_url,
    keys_folder,
    out_folder,
    panel_request,
    settings,
)
from .viewer import show_results

# What the panel shows of the backend: the last ping's status line, a failed start's log.
_STATUS = LINE


_settings, _keys, _out = settings, keys_folder, out_folder


# -- operators ---------------------------------------------------------------------------------

def _default_skin_model_for_another(scene, s) -> bool:
    """The skin pipeline with no model named (the backend's default, the embedded demo
    model) for a character that is not the demo's: refused before a backend is asked."""
    from ..skin.ui import shows_the_demo_character

    return (s.pipeline.strip() == "skin" and not s.model.strip()
            and not shows_the_demo_character(scene))


def error_text(e: Exception) -> str:
    """The message an operator reports; a backend that only has the echo pipeline was
    started with a Python lacking the diffusion packages: say where to fix that."""
    text = str(e)
    if isinstance(e, BackendError) and "unknown pipeline" in e.message and \
            e.message.rstrip().endswith(": echo"):
        text += (" (the backend's Python has no diffusion packages: set Preferences > "
                 "Add-ons > Painted Skin > Backend Python to a Python with "
                 "painted-skin[backend] installed, e.g. .venv-backend/bin/python, and start "
                 "the backend again)")
    return text


class PS_OT_restyle(bpy.types.Operator):
    """Restyle the scene's frame range through the backend (Esc or Cancel stops; re-running
    resumes)"""

    bl_idname = "painted_skin.restyle"
    bl_label = "Restyle Shot"

    _timer = None
    _client: BackendClient | None = None

    @classmethod
    def poll(cls, context):
        s = _settings(context)
        why = ("a restyle is running: Cancel it first" if ActiveRun.op is not None
               else "choose a pipeline" if not s.pipeline.strip()
               else "choose an Output folder" if not s.out_dir.strip()
               else "the Output folder is relative to the .blend, which is not saved yet: "
                    "save it first, or choose an absolute folder"
               if s.out_dir.startswith("//") and not bpy.data.filepath
               else "the scene has no camera: add one (Passes panel: Add Camera)"
               if context.scene.camera is None
               else "the skin pipeline's default model is the demo character's: pick this "
                    "character's model (Skin Model panel: Restyle with Skin Model)"
               if _default_skin_model_for_another(context.scene, s) else None)
        if why:
            cls.poll_message_set(why)
        return why is None

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, run blocking.
        try:
            summary = restyle_shot(context.scene, panel_request(context),
                                   on_dead=restart_local_if_dead)
        except (ShotError, BackendError, UnwritableOutput, OSError, RequestError) as e:
            self._tell(context, "ERROR", error_text(e))
            return {"CANCELLED"}
        text = (f"restyled: {summary['written'] + summary['skipped']}/{summary['frames']} "
                f"frames in {summary['out']}")
        notice = summary.get("notice")
        self._tell(context, "WARNING" if notice else "INFO",
                   f"{text}. Note: {notice}" if notice else text)
        return {"FINISHED"}

    def _tell(self, context, kind: str, text: str) -> None:
        """Report ``text`` and keep it in the panel (the status bar's message is gone in
        seconds; a backend's refusal must still be readable after its popup)."""
        _settings(context).last_report = text
        self.report({kind}, text)

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        s, scene = _settings(context), context.scene
        self._frames = list(range(scene.frame_start, scene.frame_end + 1))
        try:
            req = panel_request(context)
            self._out, (w, h) = req.out, req.size
            options = pipeline_options(scene, req.pipeline, shot_options(
                scene, self._out, w, h, dict(req.options)))
            self._run_lock = check_settings(self._out, shot_settings(
                req.pipeline, req.prompt, req.negative_prompt, req.seed, w, h, options,
                req.refs))
            todo = [f for f in self._frames if not frame_done(self._out, f)]
            self._done, self._frame_now = len(self._frames) - len(todo), scene.frame_current
            if not todo:
                self._run_lock.close()
                show_results(context, self._out, self._frames, s.use_vse)
                self.report({"INFO"}, "restyle: every frame is already done")
                return {"FINISHED"}
            self._client = BackendClient(req.url, keys=req.keys, on_dead=restart_local_if_dead)
            self._model = str(options.get("model") or req.pipeline)
            self._model_checked = False
            self._client.open(req.pipeline, w, h, wait=False, refs=list(req.refs),
                              prompt=req.prompt, negative_prompt=req.negative_prompt,
                              seed=req.seed, options=options)
            (self._out / RESTYLED).mkdir(parents=True, exist_ok=True)
            carry = CarrySource(scene, self._out, w, h, options=options,
                                first=self._frames[0], pipeline=req.pipeline)
            frames = shot_frames(scene, todo, w, h, passes=wire_passes(req.pipeline))
            self._client.start_shot(carry.remembering(frames),
                                    lambda r: self._on_result(r, w, h), carry_for=carry,
                                    primers_for=carry.primers)
        except (ShotError, BackendError, UnwritableOutput, OSError, RequestError) as e:
            if getattr(self, "_run_lock", None) is not None:
                self._run_lock.close()
            if getattr(self, "_client", None) is not None:
                self._client.close()
                self._client = None
            self._tell(context, "ERROR", error_text(e))
            return {"CANCELLED"}
        wm = context.window_manager
        wm.progress_begin(0, len(self._frames))
        wm.progress_update(self._done)
        self._timer = wm.event_timer_add(0.05, window=context.window)
        wm.modal_handler_add(self)
        ActiveRun.op = self
        return {"RUNNING_MODAL"}

    def _on_result(self, r: Result, width: int, height: int) -> None:
        if not self._model_checked:  # OPENED has come: its model_id, before a frame lands
            check_model(self._out, self._client.model_id, self._model, self._run_lock)
            self._model_checked = True
            if self._client.notice:  # told as the shot starts, and kept at its end
                self.report({"WARNING"}, self._client.notice)
        write_result(self._out, r, width, height)
        self._done += 1

    def modal(self, context, event):
        shot = self._client.shot
        if event.type == "ESC" and event.value == "PRESS":
            self._client.cancel()
            context.workspace.status_text_set("Painted Skin restyle: cancelling…")
            return {"RUNNING_MODAL"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            # One new frame per tick: computing passes costs ~0.1 s at 512².
            self._client.poll_once(0, max_send=1)
        except Exception as e:  # disk full, a bad frame...: never leave the UI half-done
            self._error = str(e)
            self.report({"ERROR"}, self._error)
            return self._finish(context)
        if shot.error is not None:
            self._error = error_text(shot.error)
            self.report({"ERROR"}, self._error)
            return self._finish(context)
        context.window_manager.progress_update(self._done)
        if getattr(self, "_shown", None) != self._done:
            self._shown = self._done
            _redraw(context)  # the panel's "n/N frames"
        step = (f", frame {shot.last_progress[0]} step {shot.last_progress[1]}/"
                f"{shot.last_progress[2]}" if shot.last_progress else "")
        context.workspace.status_text_set(
            f"Painted Skin restyle: {self._done}/{len(self._frames)} frames{step} — Esc to stop")
        if shot.done:
            return self._finish(context)
        return {"RUNNING_MODAL"}

    def _release(self, context) -> None:
        """What a run holds, given back however it ends: the panel's run, the timer,
        the progress, the backend session and the output folder's lock."""
        ActiveRun.op = None
        wm = context.window_manager
        if self._timer is not None:
            wm.event_timer_remove(self._timer)
            self._timer = None
        wm.progress_end()
        if context.workspace is not None:
            context.workspace.status_text_set(None)
        self._client.close(timeout_s=0.2)  # the UI must not wait on a dead backend
        self._run_lock.close()

    def cancel(self, context):
        """Blender ended the modal itself (a file opened, Blender closing): frames written
        are kept, and a new Restyle resumes."""
        self._client.cancel()
        self._release(context)

    def _finish(self, context):
        shot = self._client.shot
        self._release(context)
        context.scene.frame_set(self._frame_now)
        show_results(context, self._out, self._frames, _settings(context).use_vse)
        ok = shot is not None and shot.error is None and not shot.cancelled
        why = getattr(self, "_error", "")
        notice = self._client.notice
        self._tell(context, "INFO" if ok and not notice else "WARNING",
                   f"restyle: {self._done}/{len(self._frames)} frames in {self._out}"
                   + ("" if ok else f" (stopped: {why}; run again to resume)" if why
                      else " (stopped; run again to resume)")
                   + (f". Note: {notice}" if notice else ""))
        return {"FINISHED"} if ok else {"CANCELLED"}


class PS_OT_backend_connect(bpy.types.Operator):
    """Ping the backend at the URL and show its status"""

    bl_idname = "painted_skin.backend_connect"
    bl_label = "Connect"

    url: StringProperty(name="URL", default="", description="Empty: the panel's URL")
    timeout: FloatProperty(name="Timeout", default=3.0, min=0.1, description="Seconds")

    def execute(self, context):
        url = self.url or backend_url(context)
        _settings(context).url = url  # Connect points the panel at it: no longer a find
        _STATUS.update(held=False, log_tail="")  # the animator asked anew: a fresh answer
        try:
            with BackendClient(url, keys=_keys(context), timeout_s=self.timeout) as c:
                st = c.status()
        except BackendError as e:
            LIVE.record(BackendStatus(url=url, error=str(e)))
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        LIVE.record(parse_status(url, st))
        self.report({"INFO"}, _STATUS["text"])
        return {"FINISHED"}


def status_line(url: str, st: dict) -> str:
    """The panel's line for a STATUS reply ``st`` from ``url``."""
    return parse_status(url, st).line()


def _log_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _redraw(context) -> None:
    for window in getattr(context.window_manager, "windows", []):
        for area in window.screen.areas:
            if area.type in ("VIEW_3D", "PREFERENCES"):
                area.tag_redraw()


class PS_OT_backend_start(bpy.types.Operator):
    """Start `painted-skin serve` here with the preferences' Backend Python; the panel shows
    its progress, and its log's last lines if it fails"""

    bl_idname = "painted_skin.backend_start"
    bl_label = "Start Local Backend"

    _timer = None

    @classmethod
    def poll(cls, context):
        # (running: Start restarts it, as the panel's Stop-then-Start would)
        if _STATUS.get("busy"):
            cls.poll_message_set("the local backend is starting: wait for it")
            return False
        return True

    timeout: IntProperty(name="Timeout", default=60, min=1,
                         description="Seconds to wait for the backend to answer")

    def _python(self, context) -> str:
        p = preferences(context)
        return backend_python(p.python if p is not None else "")

    def _failed(self, e: BackendError):
        # The backend's own log when it ran and hung; else why it could not run at all.
        show_failure("local backend failed to start",
                     _log_lines(LOCAL.log_tail() if e.code == "timeout" else e.message))
        self.report({"ERROR"}, str(e))
        return {"CANCELLED"}

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, wait here.
        try:
            start_local_backend(self._python(context), backend_url(context), self.timeout)
        except BackendError as e:
            return self._failed(e)
        _STATUS.update(log_tail="", busy=False, held=False)
        return bpy.ops.painted_skin.backend_connect()

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        url = backend_url(context)
        try:
            stop_local_backend()
            self._proc = launch_local_backend(self._python(context), url)
        except BackendError as e:
            return self._failed(e)
        self._client = BackendClient(url, timeout_s=1.0)
        self._t0 = time.monotonic()
        _STATUS.update(text="starting local backend…", ok=False, log_tail="", busy=True,
                       held=False)
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.25, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        waited = time.monotonic() - self._t0
        outcome = None
        if self._proc.poll() is not None:
            outcome = self._failed(BackendError("exited", exit_message(self._proc)))
        else:
            try:
                self._client.ping(timeout_s=0.05)
                outcome = "up"
            except BackendUnavailable:
                if waited > self.timeout:
                    stop_local_backend()
                    outcome = self._failed(BackendError(
                        "timeout", f"the backend did not answer within {self.timeout} s; "
                                   f"log: {LOCAL.log}"))
        if outcome is None:
            _STATUS["text"] = f"starting local backend… {waited:.0f} s"
            _redraw(context)
            return {"RUNNING_MODAL"}
        self._release(context)
        _redraw(context)
        if outcome == "up":
            _STATUS["busy"] = False
            return bpy.ops.painted_skin.backend_connect()
        return outcome


    def _release(self, context) -> None:
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None
        self._client.close(timeout_s=0.1)

    def cancel(self, context):
        """Blender ended the modal (a file opened): the backend keeps starting on its own;
        the status line goes back to the live pings."""
        self._release(context)
        _STATUS["busy"] = False


class PS_OT_backend_stop(bpy.types.Operator):
    """Stop the local backend started from this Blender"""

    bl_idname = "painted_skin.backend_stop"
    bl_label = "Stop Local Backend"

    @classmethod
    def poll(cls, context):
        if not LOCAL.running():
            cls.poll_message_set("no local backend was started from this Blender")
            return False
        return True

    def execute(self, context):
        stop_local_backend()
        _STATUS.update(text="local backend stopped", ok=False, held=False, log_tail="")
        return {"FINISHED"}


CLASSES = (PS_RestyleReference, PS_RestyleSettings, PS_OT_restyle, PS_OT_backend_connect,
           PS_OT_backend_start, PS_OT_backend_stop, *PANEL_CLASSES, *RESULT_CLASSES)
SCENE_SETTINGS = {"painted_skin_restyle": PS_RestyleSettings}


def register() -> None:
    register_classes(CLASSES, **SCENE_SETTINGS)
    ensure_timer()


def unregister() -> None:
    stop_timer()
    stop_local_backend()
    unregister_classes(CLASSES, *SCENE_SETTINGS)
