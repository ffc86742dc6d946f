// SPDX-License-Identifier: GPL-3.0-or-later
//
// Flamenco job type "Painted Skin Retarget": mocap clips retargeted onto a character,
// each clip one task (or the whole folder one task), running the farm's own Blender
// with the entry script the extension ships. No shot is opened: retarget makes one.
//
//   {blender} {blenderArgs} --python-exit-code 1 -P {painted_skin_entry} --
//       retarget --source clips/walk.bvh --target hero.blend --out OUT/walk.blend
//       --report OUT/walk.json (the options of `painted-skin retarget`)
//
// Install as painted-skin-retarget.js, beside painted-skin.js: copy this file into the Manager's `scripts/` folder and
// restart it; it uses the same `painted_skin_entry` variable.
//
// Clips are independent: their tasks run in any order, in parallel. A task re-run
// rewrites its .blend atomically (a killed task leaves the previous file or none).

const CLIP_TYPES = [".bvh", ".fbx", ".glb", ".gltf"]; // as addon/blender/importers CLIP_TYPES

const JOB_TYPE = {
    label: "Painted Skin Retarget",
    description: "Retarget mocap clips onto a character with Painted Skin",
    settings: [
        { key: "source", type: "string", required: true,
          description: "Clips on the shared storage: a comma list (one task each), or " +
                       "a clip or a folder of clips (one task)" },
        { key: "target", type: "string", subtype: "file_path", required: true,
          eval: "bpy.data.filepath",
          evalInfo: { showLinkButton: true, description: "The character open in Blender" },
          description: "The character (.blend .fbx .glb .gltf)" },
        { key: "out", type: "string", subtype: "dir_path", required: true,
          description: "Output folder: OUT/<clip>.blend and OUT/<clip>.json per clip " +
                       "(a folder: OUT/<folder>.blend)" },
        { key: "map", type: "string", default: "auto",
          description: "Source bone map: auto, a preset or a file" },
        { key: "target_map", type: "string", default: "auto",
          description: "Target bone map: auto, a preset or a file" },
        { key: "ground", type: "string", choices: ["floor", "keep"], default: "floor",
          description: "floor: feet meet the character's floor; keep: scaled source height" },
        { key: "in_place", type: "bool", default: false,
          description: "Drop horizontal root motion" },
        { key: "foot_lock", type: "bool", default: true,
          description: "Pin feet in contact" },
        { key: "keep_posture", type: "bool", default: false,
          description: "Keep the character's own rest posture on top of the source's" },
        { key: "clip_action", type: "string", default: "",
          description: "The animation to use when a clip holds several" },
        { key: "entry", type: "string", default: "{painted_skin_entry}",
          description: "The entry script in the workers' installed extension" },
    ],
};

// The last path component without its extension ("C:\\clips\\walk.bvh" -> "walk").
function stem(path) {
    const name = String(path).replace(/[\\/]+$/, "").split(/[\\/]/).pop();
    const dot = name.lastIndexOf(".");
    return dot > 0 ? name.slice(0, dot) : name;
}

function isClip(path) {
    const lower = String(path).toLowerCase();
    return CLIP_TYPES.some((ext) => lower.endsWith(ext));
}

function join(folder, name) {
    return String(folder).replace(/[\\/]+$/, "") + "/" + name;
}

// The clips of `source`: a comma (or newline) list; each must be a clip file.
function sourceList(source) {
    const items = String(source).split(/[,\n]/).map((s) => s.trim()).filter((s) => s);
    if (items.length === 0) {
        throw "source names no clip: give a clip, a folder, or a comma list of clips";
    }
    if (items.length > 1) {
        const bad = items.filter((s) => !isClip(s));
        if (bad.length) {
            throw `source ${JSON.stringify(bad[0])} is not a clip (${CLIP_TYPES.join(" ")}): ` +
                "a comma list names clip files; give a folder on its own for one task";
        }
        const seen = {};
        for (const s of items) {
            if (seen[stem(s)]) {
                throw `clips ${JSON.stringify(seen[stem(s)])} and ${JSON.stringify(s)} would ` +
                    `both write ${stem(s)}.blend: rename one, or submit them as two jobs`;
            }
            seen[stem(s)] = s;
        }
    }
    return items;
}

function retargetArgs(settings, source) {
    const name = stem(source);
    const args = ["--python-exit-code", "1", "-P", settings.entry, "--", "retarget",
                  "--source", source, "--target", settings.target,
                  "--out", join(settings.out, `${name}.blend`),
                  "--report", join(settings.out, `${name}.json`),
                  "--map", settings.map || "auto", "--target-map", settings.target_map || "auto",
                  "--ground", settings.ground || "floor"];
    if (settings.in_place) {
        args.push("--in-place");
    }
    if (settings.foot_lock === false) {
        args.push("--no-foot-lock");
    }
    if (settings.keep_posture) {
        args.push("--keep-posture");
    }
    if (settings.clip_action) {
        args.push("--clip-action", settings.clip_action);
    }
    return args;
}

function compileJob(job) {
    const settings = job.settings;
    if (settings.ground !== "floor" && settings.ground !== "keep") {
        throw `ground ${JSON.stringify(settings.ground)} is unknown: floor or keep`;
    }
    for (const source of sourceList(settings.source)) {
        const task = author.Task(`retarget-${stem(source)}`, "blender");
        // No blendfile: Blender starts empty, the entry saves the shot it makes.
        task.addCommand(author.Command("blender-render", {
            exe: "{blender}",
            exeArgs: "{blenderArgs}",
            argsBefore: [],
            args: retargetArgs(settings, source),
        }));
        job.addTask(task);
    }
}
