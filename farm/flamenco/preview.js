// SPDX-License-Identifier: GPL-3.0-or-later
//
// Compile a Flamenco job type outside the Manager and print the tasks it makes, as
// JSON: the parts of the job-type author API that scripts/painted-skin.js uses
// (author.Task, author.Command, task.addCommand/addDependency, job.addTask,
// frameChunker, print) and the Manager's variable substitution. For a farm admin to
// check a job's command lines before submitting, and for the tests, which run them.
//
//   node preview.js scripts/painted-skin.js '{"frames": "1-6", "chunk_size": 3, ...}' \
//        '{"blender": "/opt/blender/blender", "blenderArgs": "-b -y", ...}'
//
// Settings not given take the job type's defaults; {variables} not given stay as is.

"use strict";

const fs = require("fs");
const vm = require("vm");

function parseFrames(text) {
    const frames = new Set();
    for (const part of String(text).split(",")) {
        const m = part.trim().match(/^(-?\d+)(?:\s*-\s*(-?\d+)(?:\s*x\s*(\d+))?)?$/);
        if (!m) {
            throw new Error(`frames ${JSON.stringify(text)}: use e.g. 1-48 or 3,5-10`);
        }
        const first = Number(m[1]), last = m[2] === undefined ? first : Number(m[2]);
        const step = m[3] === undefined ? 1 : Number(m[3]);
        if (last < first || step < 1) {
            throw new Error(`frames ${JSON.stringify(text)} is reversed or has step 0`);
        }
        for (let f = first; f <= last; f += step) {
            frames.add(f);
        }
    }
    return Array.from(frames).sort((a, b) => a - b);
}

// Flamenco's frameChunker: chunks of `size` frames, each written as ranges ("1-3", "9,11").
function frameChunker(text, size) {
    const frames = parseFrames(text);
    const chunks = [];
    for (let i = 0; i < frames.length; i += Math.max(1, size)) {
        const group = frames.slice(i, i + Math.max(1, size));
        const runs = [];
        for (const f of group) {
            const run = runs[runs.length - 1];
            if (run && f === run[1] + 1) {
                run[1] = f;
            } else {
                runs.push([f, f]);
            }
        }
        chunks.push(runs.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(","));
    }
    return chunks;
}

function substitute(value, variables) {
    if (typeof value === "string") {
        return value.replace(/{([A-Za-z0-9_]+)}/g,
                             (match, name) => (name in variables ? variables[name] : match));
    }
    if (Array.isArray(value)) {
        return value.map((v) => substitute(v, variables));
    }
    if (value !== null && typeof value === "object") {
        const out = {};
        for (const key of Object.keys(value)) {
            out[key] = substitute(value[key], variables);
        }
        return out;
    }
    return value;
}

function compile(jobTypeFile, given, variables) {
    const tasks = [];
    const author = {
        Task(name, type) {
            const task = { name, type, commands: [], dependencies: [] };
            return {
                _task: task,
                addCommand(cmd) { task.commands.push(cmd); },
                addDependency(other) { task.dependencies.push(other._task.name); },
            };
        },
        Command(type, parameters) { return { type, parameters }; },
    };
    const sandbox = { author, frameChunker, print: (...a) => console.error(...a), JSON };
    vm.createContext(sandbox);
    vm.runInContext(`${fs.readFileSync(jobTypeFile, "utf8")}\n;this.JOB_TYPE = JOB_TYPE;`,
                    sandbox, { filename: jobTypeFile });
    const settings = {};
    for (const s of sandbox.JOB_TYPE.settings) {
        if (s.default !== undefined) {
            settings[s.key] = s.default;
        }
    }
    Object.assign(settings, given);
    for (const s of sandbox.JOB_TYPE.settings) {
        if (s.required && settings[s.key] === undefined) {
            throw new Error(`setting ${s.key} is required`);
        }
    }
    const job = { settings, addTask(t) { tasks.push(t._task); } };
    sandbox.compileJob(job);
    return substitute(tasks, variables);
}

if (require.main === module) {
    const [file, settings, variables] = process.argv.slice(2);
    try {
        const tasks = compile(file, JSON.parse(settings || "{}"), JSON.parse(variables || "{}"));
        process.stdout.write(JSON.stringify(tasks, null, 1) + "\n");
    } catch (e) {
        process.stderr.write(`job compile failed: ${e && e.message ? e.message : e}\n`);
        process.exit(2);
    }
}

module.exports = { compile, frameChunker };
