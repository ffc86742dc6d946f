// SPDX-License-Identifier: GPL-3.0-or-later
//
// Flamenco job type "Painted Skin": control passes or a restyled shot, in chunks of
// frames, each chunk one task running the farm's own Blender with the entry script
// the extension ships:
//
//   {blender} {blenderArgs} shot.blend --python-exit-code 1 -P {painted_skin_entry} --
//       passes|restyle --frames 1-24 --out ... (the options of `painted-skin passes|restyle`)
//
// Install: copy this file into the `scripts/` folder next to the Flamenco Manager
// executable and restart the Manager; define the two-way variable
// `painted_skin_entry` in flamenco-manager.yaml (per platform: the path of
// painted_skin/addon/farm_entry.py in the workers' installed extension).
//
// A temporal restyle (each frame warps the one before) is only the same shot when its
// frames are painted in order: its tasks then each depend on the previous chunk's, and
// the entry itself refuses (exit 2) a chunk whose previous frame is not on disk yet.

const PASSES_DEFAULT = "depth,normal,skeleton,mask,parts,motion";
const STATELESS_PIPELINES = ["echo"]; // as addon/blender/restyle.py STATELESS_PIPELINES

const JOB_TYPE = {
    label: "Painted Skin",
    description: "Render control passes or restyle a shot with Painted Skin",
    settings: [
        { key: "command", type: "string", choices: ["passes", "restyle"], default: "restyle",
          required: true, description: "passes: control passes; restyle: painted frames" },
        { key: "frames", type: "string", required: true,
          eval: "f'{C.scene.frame_start}-{C.scene.frame_end}'",
          evalInfo: { showLinkButton: true, description: "Scene frame range" },
          description: "Frames, e.g. '1-48', '3,5-10' or '1-100x2'" },
        { key: "chunk_size", type: "int32", default: 12, required: true,
          description: "Frames per task", visible: "submission" },
        { key: "out", type: "string", subtype: "dir_path", required: true,
          description: "Output folder on the shared storage (re-running resumes); passes " +
                       "also take an output pattern, e.g. '//render/passes/shot_####' " +
                       "(-> depth/shot_0007.exr ...)" },
        { key: "size", type: "string", default: "512x512", description: "WIDTHxHEIGHT" },
        { key: "camera", type: "string", default: "",
          description: "Camera object, or 'auto' (default: the scene's)" },
        { key: "passes", type: "string", default: PASSES_DEFAULT,
          description: "passes: the comma list of passes" },
        { key: "engine", type: "string", choices: ["fast", "cycles"], default: "fast",
          description: "passes: the engine" },
        { key: "from_scene", type: "bool", default: false,
          description: "restyle: render what the artist set in the shot's Restyle panel " +
                       "(saved in the .blend: pipeline, model, prompts, seed, size, " +
                       "references); the job's options then only override" },
        { key: "pipeline", type: "string", default: "skin", description: "restyle: pipeline" },
        { key: "prompt", type: "string", default: "", description: "restyle: prompt" },
        { key: "negative_prompt", type: "string", default: "",
          description: "restyle: negative prompt" },
        { key: "seed", type: "int32", default: 0, description: "restyle: shot seed" },
        { key: "options", type: "string", default: "",
          description: "restyle: pipeline options, a JSON object" },
        { key: "url", type: "string", default: "tcp://127.0.0.1:5555",
          description: "restyle: the backend (or broker) every worker reaches" },
        { key: "keys", type: "string", default: "",
          description: "restyle: CurveZMQ keys folder, for a backend on another machine" },
        { key: "frame_pattern", type: "string", default: "",
          description: "restyle: file name of each frame in OUT/restyled, e.g. " +
                       "'sh010_####' (# count = zero padding; default ####)" },
        { key: "entry", type: "string", default: "{painted_skin_entry}",
          description: "The entry script in the workers' installed extension" },
        // Set by the Flamenco add-on when the job is submitted.
        { key: "blendfile", type: "string", required: true, visible: "web",
          description: "The shot" },
    ],
};

function pipelineOptions(settings) {
    if (!settings.options) {
        return {};
    }
    let options;
    try {
        options = JSON.parse(settings.options);
    } catch (e) {
        throw `options ${JSON.stringify(settings.options)} is not JSON: give an object, ` +
            `e.g. {"steps": 4}`;
    }
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
        throw `options ${JSON.stringify(settings.options)} is not a JSON object`;
    }
    return options;
}

// Whether a frame depends on the frames before it (as is_chained in restyle.py).
function isChained(pipeline, options) {
    if (STATELESS_PIPELINES.indexOf(pipeline) >= 0) {
        return false;
    }
    const crossFrame = options.cross_frame;
    const anchored = !(crossFrame === undefined || crossFrame === null || crossFrame === false ||
                       crossFrame === "" || crossFrame === "off" || crossFrame === "none");
    return options.temporal !== false || anchored;
}

function commandArgs(settings, chunk) {
    const args = ["--python-exit-code", "1", "-P", settings.entry, "--",
                  settings.command, "--frames", chunk, "--out", settings.out];
    if (!(settings.command === "restyle" && settings.from_scene)) {
        args.push("--size", settings.size);
    }
    if (settings.camera) {
        args.push("--camera", settings.camera);
    }
    if (settings.command === "passes") {
        args.push("--passes", settings.passes || PASSES_DEFAULT, "--engine", settings.engine);
        return args;
    }
    if (settings.from_scene) {
        args.push("--from-scene", "--url", settings.url);
    } else {
        args.push("--pipeline", settings.pipeline, "--prompt", settings.prompt || "",
                  "--negative-prompt", settings.negative_prompt || "",
                  "--seed", String(settings.seed || 0), "--url", settings.url);
    }
    if (settings.options) {
        args.push("--options", settings.options);
    }
    if (settings.keys) {
        args.push("--keys", settings.keys);
    }
    if (settings.frame_pattern) {
        args.push("--frame-pattern", settings.frame_pattern);
    }
    return args;
}

function compileJob(job) {
    const settings = job.settings;
    if (settings.command !== "passes" && settings.command !== "restyle") {
        throw `command ${JSON.stringify(settings.command)} is unknown: passes or restyle`;
    }
    // from the scene: its pipeline and options are only known on the worker, so the
    // chunks run in order (safe for any pipeline; the entry refuses a chunk out of order)
    const chained = settings.command === "restyle" && (settings.from_scene ||
        isChained(settings.pipeline, pipelineOptions(settings)));
    let previous = null;
    for (const chunk of frameChunker(settings.frames, settings.chunk_size)) {
        const task = author.Task(`${settings.command}-${chunk}`, "blender");
        task.addCommand(author.Command("blender-render", {
            exe: "{blender}",
            exeArgs: "{blenderArgs}",
            argsBefore: [],
            blendfile: settings.blendfile,
            args: commandArgs(settings, chunk),
        }));
        if (chained && previous !== null) {
            task.addDependency(previous); // a temporal chain: in order
        }
        job.addTask(task);
        previous = task;
    }
}
