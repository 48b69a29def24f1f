// amf_ros operator console: renders what the node pushes over one WebSocket, sends validated commands back.
// No build step: plain browser JavaScript plus the vendored uPlot (static/vendor).
"use strict";

const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("token") || "";
const state = { tasks: [], instructions: {}, targets: {}, sim: false, ws: null, plots: {} };
const fmt = (x, d = 2) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(d));
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

// ---- connection -------------------------------------------------------------------------------------------
let retry = 500;
function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws${token ? "?token=" + encodeURIComponent(token) : ""}`;
  const ws = new WebSocket(url);
  state.ws = ws;
  ws.onopen = () => { retry = 500; setConn(true); if (drive.on) wsSend({ op: "view", mode: "drive" }); };
  // a dropped connection lets go of everything: after it, nothing moves until keys are pressed again
  ws.onclose = () => { setConn(false); drive.keys.clear(); drive.live = false; setTimeout(connect, retry); retry = Math.min(retry * 2, 5000); };
  ws.onmessage = (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch (e) { return; }
    if (msg.type === "hello") {
      state.tasks = msg.tasks || [];
      drive.client = msg.client || "";
      for (const [name, data] of Object.entries(msg.sections)) render(name, data);
    } else if (msg.type === "section") {
      render(msg.name, msg.data);
    } else if (msg.type === "camera") {
      showCamera(msg.name, msg.jpeg, msg.at, msg.stamp);
    } else if (msg.type === "result") {
      showResult(msg.op, msg.ok, msg.text);
    }
  };
}
function setConn(ok) {
  const el = $("conn");
  el.textContent = ok ? "connected" : "disconnected: reconnecting…";
  el.className = "badge " + (ok ? "good" : "bad");
}
function send(op, withTask) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) { showResult(op, false, "not connected to the console"); return; }
  const msg = { op };
  if (withTask) msg.task = $("task-select").value;
  state.ws.send(JSON.stringify(msg));
  showResult(op, null, `${op}: sent…`);
}
function wsSend(doc) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
  state.ws.send(JSON.stringify(doc));
  return true;
}
function showResult(op, ok, text) {
  const el = $("last-result");
  el.textContent = text;
  el.className = "result " + (ok === true ? "ok" : ok === false ? "fail" : "muted");
  el.dataset.op = op;
}

// ---- sections ---------------------------------------------------------------------------------------------
const renderers = {
  selector(d) {
    state.tasks = d.tasks || state.tasks;
    state.instructions = d.instructions || {};
    state.targets = d.targets || {};
    fillTaskSelect();
    const dec = d.decision;
    state.decided = !!dec;
    if (!dec) { showSelectorDown(); return; }
    $("next-task").textContent = dec.ok ? dec.task : "no decision";
    $("next-task").dataset.task = dec.ok ? dec.task : "";
    $("next-instruction").textContent = dec.ok ? `“${dec.instruction || state.instructions[dec.task] || ""}”` : "";
    $("selector-name").textContent = dec.selector || "–";
    $("warm-start").hidden = !dec.warm_start;
    $("compute-time").textContent = dec.compute_time_s === null ? "–" : `${fmt(dec.compute_time_s, 2)} s`;
    $("decision-message").textContent = dec.ok ? "" : dec.message;
    const finite = (dec.gains || []).filter((g) => g !== null);
    const top = Math.max(1e-12, ...finite);
    const rows = (dec.tasks || []).map((t, i) => {
      const gain = dec.gains[i], score = dec.scores[i], n = dec.demo_counts[i] ?? 0, ess = dec.effective_sample_size[i];
      const target = state.targets[t];
      const width = gain === null ? 0 : Math.max(1, (100 * gain) / top);
      const hover = dec.warm_start ? "warm start: every task gets one demonstration before AMF's criterion decides (paper App. M)"
        : dec.selector !== "amf" ? `${dec.selector} does not rank tasks by information; its score: ${score}`
        : score === null ? "no score" : `criterion after a demonstration of ${t}: ${score.toFixed(4)} (lower = more informative)`;
      const label = gain !== null ? "+" + gain.toFixed(3) : dec.warm_start ? (n > 0 ? "has its first demo" : "needs its first demo") : "–";
      return `<tr data-task="${esc(t)}" class="${t === dec.task ? "chosen" : ""}">
        <td>${esc(t)}</td>
        <td class="barcell" title="${esc(hover)}" data-score="${score === null ? "" : score}"><div class="bar"><span style="width:${width}%"></span><em>${esc(label)}</em></div></td>
        <td class="count ${target && n >= target ? "met" : ""}" data-count="${n}">${n}${target ? " / " + target : ""}</td>
        <td>${fmt(ess, 1)}</td></tr>`;
    });
    $("why").querySelector("tbody").innerHTML = rows.join("");
  },
  policy(d) {
    $("checkpoint").textContent = d.checkpoint ? d.checkpoint.split("/").filter(Boolean).pop() : "none yet";
    $("checkpoint").title = d.checkpoint || "";
    $("round").textContent = d.round === null || d.round === undefined ? "" : `(round ${d.round})`;
    const alphas = Object.entries(d.alphas || {});
    const amax = Math.max(1e-9, ...alphas.map(([, a]) => a || 0));
    $("alphas").querySelector("tbody").innerHTML = alphas.map(([t, a]) =>
      `<tr data-task="${esc(t)}"><td>${esc(t)}</td><td class="barcell"><div class="bar"><span style="width:${a === null ? 0 : (100 * a) / amax}%"></span><em>${fmt(a, 3)}</em></div></td></tr>`).join("");
    const ft = d.fine_tune;
    if (ft) {
      $("fine-tune-state").textContent = ft.running ? "running" : (ft.message || "idle");
      $("fine-tune-step").textContent = ft.running && ft.total ? `step ${ft.step} / ${ft.total}` : "";
      // the model's axis: log when the losses span more than 10x, else a robust range (a first loss of 100 must not
      // flatten the rest of the curve)
      plotLines("loss-plot", "loss", ft.losses.map((p) => p[0]), { loss: ft.losses.map((p) => p[1]) }, "step",
        ft.loss_axis && ft.loss_axis.range, ft.loss_axis && ft.loss_axis.log);
    }
    const ev = d.evaluation;
    if (ev) $("evaluation-state").textContent = ev.running ? `${ev.task}: step ${ev.step}` : (ev.message || "idle");
    const rounds = new Set();
    const byTask = {};
    for (const [t, pts] of Object.entries(d.success || {})) {
      const agg = {};
      for (const [r, s] of pts) { (agg[r] = agg[r] || []).push(s); rounds.add(r); }
      byTask[t] = agg;
    }
    const xs = [...rounds].sort((a, b) => a - b);
    const series = {};
    for (const [t, agg] of Object.entries(byTask)) series[t] = xs.map((r) => (agg[r] ? agg[r].reduce((a, b) => a + b, 0) / agg[r].length : null));
    plotLines("success-plot", "success", xs, series, "round", [0, 1]);
  },
  recorder(d) {
    if (!d) return;
    $("recorder-state").textContent = d.recording ? `recording ${d.task}` : "idle";
    $("recorder-state").className = d.recording ? "rec" : "";
    $("recorder-episode").textContent = d.episode_id || "–";
    $("recorder-steps").textContent = d.recording ? d.num_steps : "–";
    $("episodes-in-store").textContent = d.episodes_in_store;
    $("recorder-ready").textContent = d.ready ? "yes" : `no: ${d.not_ready_reason}`;
    $("recorder-error").textContent = d.last_error || "none";
    $("recorder-error").className = d.last_error ? "" : "muted";
    $("recorder-note").textContent = d.last_note || "–";  // an expected refusal (e.g. "not recording"): no error
  },
  streams(rows) {
    $("streams").querySelector("tbody").innerHTML = rows.map((r) => {
      const cls = r.warning.startsWith("stale") || r.warning === "never heard" ? "stale" : r.warning ? "slow" : "";
      return `<tr data-topic="${esc(r.topic)}" class="${cls}"><td>${esc(r.topic)}</td><td>${r.age_s === null ? "–" : fmt(r.age_s, 1) + " s"}</td>
        <td>${fmt(r.rate_hz, 1)} Hz</td><td>${r.nominal_hz ? fmt(r.nominal_hz, 1) + " Hz" : "–"}</td><td class="warning">${esc(r.warning)}</td></tr>`;
    }).join("");
    const bad = rows.filter((r) => r.warning);
    $("stream-warning").hidden = bad.length === 0;
    $("stream-warning").textContent = bad.map((r) => `${r.topic}: ${r.warning}`).join(" · ");
  },
  nodes(rows) {
    state.nodes = rows;
    $("nodes").querySelector("tbody").innerHTML = rows.map((r) =>
      `<tr data-node="${esc(r.node)}" data-state="${esc(r.state)}" class="${esc(r.state.replace(" ", "-"))}"><td>${esc(r.node)}</td>
        <td>${esc(r.state)}</td><td>${esc(r.reason)}</td></tr>`).join("");
    const bad = rows.filter((r) => r.state === "down" || r.state === "not ready");
    $("node-warning").hidden = bad.length === 0;
    $("node-warning").textContent = bad.map((r) => `${r.node} ${r.state}`).join(" · ");
    showSelectorDown();
  },
  camera(d) {
    state.camera = d;
    const none = $("camera-none");
    if (!none) return;  // frames are showing
    const published = (d.topics || []).filter((t) => (d.publishers || {})[t] > 0);
    none.textContent = published.length ? `no camera frames yet (${published.join(", ")})`
      : `no camera configured: nothing publishes ${(d.topics || []).join(", ") || "an image topic"}`;
  },
  drive(d) {
    const s = d.session || {};
    const who = $("drive-who");
    who.dataset.driver = s.driver || "";
    who.textContent = !s.driver ? "nobody drives" : s.driver === drive.client ? "you drive" : `browser ${s.driver} drives`;
    who.className = "badge " + (s.driver && s.driver !== drive.client ? "warn" : s.driver ? "good" : "");
    if (d.topic) $("drive-topic").textContent = d.topic;
    const c = d.control || { source: "none" }, badge = $("drive-control");
    badge.dataset.source = c.source;
    badge.textContent = c.source === "human" ? `human in control (${c.node || "teleop"})`
      : c.source === "policy" ? "policy in control" : "no policy goal";
    badge.className = "badge " + (c.source === "human" ? "warn" : c.source === "policy" ? "good" : "");
    const el = $("teleop-state");
    if (!d.teleop) return;
    el.innerHTML = Object.entries(d.teleop).map(([k, v]) =>
      `<span>${esc(k)}</span><b data-key="${esc(k)}">${esc(typeof v === "number" ? fmt(v, 3).replace(/\.?0+$/, "") : v)}</b>`).join("") +
      (d.teleop_error ? `<span>problem</span><b class="fail">${esc(d.teleop_error)}</b>` : "");
  },
  sim(d) {
    state.sim = !!d.available;
    for (const el of document.querySelectorAll(".sim-only")) el.hidden = !state.sim;
    $("sim-panel").hidden = !state.sim;
    if (d.task !== undefined) {
      $("sim-task").textContent = d.task;
      $("sim-steps").textContent = d.steps;
      $("sim-success").textContent = d.success ? "solved" : d.done ? "done, not solved" : "not solved";
    }
  },
  episodes(list) {
    $("episodes").innerHTML = list.map((e) =>
      `<li data-episode="${esc(e.episode_id)}">${esc(e.episode_id)} · ${esc(e.task)} · ${e.num_steps} steps · ${e.success ? "success" : "failure"}</li>`).join("");
  },
  log(lines) {
    $("log").innerHTML = lines.map((l) =>
      `<li class="${esc(l.level)}">${new Date(l.at * 1000).toLocaleTimeString()} ${esc(l.text)}</li>`).join("");
  },
};
function render(name, data) { if (renderers[name]) renderers[name](data); }

// before any decision: say why none can come instead of "press Ask" while task_selector is down or not ready
function showSelectorDown() {
  if (state.decided) return;
  const sel = (state.nodes || []).find((r) => r.node === "task_selector");
  const down = sel && (sel.state === "down" || sel.state === "not ready");
  $("next-task").textContent = down ? `task_selector ${sel.state}` : "press Ask";
  $("next-instruction").textContent = down ? sel.reason : "";
}

function fillTaskSelect() {
  const sel = $("task-select");
  const have = [...sel.options].map((o) => o.value).slice(1).join(",");
  if (have === state.tasks.join(",")) return;
  const keep = sel.value;
  sel.innerHTML = `<option value="">the decision's task</option>` +
    state.tasks.map((t) => `<option value="${esc(t)}">${esc(t)}</option>`).join("");
  sel.value = state.tasks.includes(keep) ? keep : "";
}

const COLORS = ["#2f6fdf", "#e0622e", "#1a7f37", "#8e44ad", "#b26a00", "#c62828", "#00838f", "#6b7480"];
function plotLines(id, title, xs, series, xlabel, yrange, ylog) {
  const el = $(id);
  const names = Object.keys(series);
  if (xs.length === 0 || names.length === 0 || typeof uPlot === "undefined") {
    if (state.plots[id]) { state.plots[id].destroy(); delete state.plots[id]; }
    el.innerHTML = `<span class="muted">no ${title} yet</span>`;
    return;
  }
  const data = [xs, ...names.map((n) => series[n])];
  const key = names.join(",") + (ylog ? ":log" : "");
  let plot = state.plots[id];
  if (plot && plot._key === key) {
    plot.setData(data);
    if (yrange) plot.setScale("y", { min: yrange[0], max: yrange[1] });
    return;
  }
  if (plot) plot.destroy();
  el.innerHTML = "";
  plot = new uPlot({
    width: Math.max(280, el.clientWidth || 360), height: 160,
    scales: { x: { time: false }, y: ylog ? { distr: 3, log: 10 } : yrange ? { range: yrange } : {} },
    axes: [{ label: xlabel }, {}],
    series: [{ label: xlabel }, ...names.map((n, i) => ({ label: n, stroke: COLORS[i % COLORS.length], width: 2, points: { show: true } }))],
  }, data, el);
  plot._key = key;
  state.plots[id] = plot;
}

function showCamera(name, jpeg, at, stamp) {
  const box = $("cameras");
  let img = box.querySelector(`img[data-camera="${CSS.escape(name)}"]`);
  if (!img) {
    if (!box.querySelector("img")) box.innerHTML = "";
    const fig = document.createElement("figure");
    fig.innerHTML = `<img data-camera="${esc(name)}" alt="${esc(name)}"><figcaption>${esc(name)}</figcaption>`;
    box.appendChild(fig);
    img = fig.querySelector("img");
  }
  img.src = "data:image/jpeg;base64," + jpeg;
  img.dataset.stamp = stamp ?? "";  // the image's capture time (its header stamp), before data-at: observers read both
  img.dataset.at = at;
}

// ---- Drive ------------------------------------------------------------------------------------------------
// Held keys and the gamepad become the console mapping (amf_ros/console/drive.py): 7 axes, 4 buttons, sent to the
// console every 50 ms while anything is held and at once on every key down / up; the console republishes it as
// sensor_msgs/Joy for the teleop node. Nothing is sent while nothing is held (the console then goes silent).
const AXES = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"];
const BUTTONS = ["deadman", "fine", "gripper_toggle", "rotation"];
// event.code (the physical key, any layout) -> [axis, sign, only with rotation enable (Shift)]
const DRIVE_KEYS = {
  KeyW: [0, 1], KeyS: [0, -1], KeyA: [1, 1], KeyD: [1, -1], KeyR: [2, 1], KeyF: [2, -1],
  KeyU: [3, 1, true], KeyO: [3, -1, true], KeyI: [4, 1, true], KeyK: [4, -1, true], KeyJ: [5, 1, true], KeyL: [5, -1, true],
  KeyE: [6, 1], KeyQ: [6, -1],
};
const DRIVE_CODES = new Set([...Object.keys(DRIVE_KEYS), "Space", "ShiftLeft", "ShiftRight", "KeyG", "KeyZ"]);
const DRIVE_PERIOD_MS = 50;
const PAD_DEADZONE = 0.1;
const drive = { on: false, keys: new Set(), fine: false, live: false, timer: null, client: "", padFine: false,
                sent: 0, keyAt: 0, pad: "" };

// the first connected standard-mapping gamepad as the console mapping (w3c.github.io/gamepad/#remapping), or null
function readPad() {
  if (!navigator.getGamepads || document.hidden) return null;
  const pads = [...navigator.getGamepads()].filter((p) => p && p.connected);
  const pad = pads.find((p) => p.mapping === "standard");
  const status = pad ? `${pad.id} (standard mapping)` : pads.length ? `${pads[0].id}: not a standard mapping, not used`
    : "no gamepad: connect one and press a button";
  if (status !== drive.pad) { drive.pad = status; $("gamepad-status").textContent = status; }
  if (!pad) return null;
  const dz = (v) => (Math.abs(v || 0) < PAD_DEADZONE ? 0 : v);
  const down = (i) => (pad.buttons[i] && pad.buttons[i].pressed ? 1 : 0);
  const value = (i) => dz(pad.buttons[i] ? pad.buttons[i].value : 0);
  const rot = down(4);  // LB: rotation enable
  const axes = [-dz(pad.axes[1]), -dz(pad.axes[0]), -dz(pad.axes[3]),
    rot * (down(14) - down(15)), rot * (down(12) - down(13)), rot * -dz(pad.axes[2]), value(6) - value(7)];
  if (down(2) && !drive.padFine) drive.fine = !drive.fine;  // X: fine / coarse on its press
  drive.padFine = !!down(2);
  const buttons = [down(5), 0, down(0), rot];
  return { axes, buttons, active: axes.some((a) => a !== 0) || buttons.some((b) => b) };
}

function driveState() {
  const axes = [0, 0, 0, 0, 0, 0, 0];
  const k = drive.keys;
  const rot = k.has("ShiftLeft") || k.has("ShiftRight");
  for (const code of k) {
    const m = DRIVE_KEYS[code];
    if (m && (!m[2] || rot)) axes[m[0]] += m[1];
  }
  const buttons = [k.has("Space") ? 1 : 0, 0, k.has("KeyG") ? 1 : 0, rot ? 1 : 0];
  let source = "keyboard";
  const pad = readPad();
  if (pad && pad.active) {
    source = "gamepad";
    for (let i = 0; i < axes.length; i++) axes[i] += pad.axes[i];
    for (let i = 0; i < buttons.length; i++) buttons[i] = buttons[i] || pad.buttons[i];
  }
  buttons[1] = drive.fine ? 1 : 0;
  return { axes: axes.map((a) => Math.max(-1, Math.min(1, Math.round(a * 1000) / 1000))), buttons, source };
}

// send the current state while anything is held, and once more when the last thing is let go; the first input of
// every press follows an all-released one (the teleop node counts a deadman press only after it saw it released)
function driveSend() {
  if (!drive.on) return;
  const s = driveState();
  const live = s.axes.some((a) => a !== 0) || s.buttons[0] === 1 || s.buttons[2] === 1 || s.buttons[3] === 1;
  if (live && !drive.live) wsSend({ op: "drive", axes: [0, 0, 0, 0, 0, 0, 0], buttons: [0, s.buttons[1], 0, 0], source: "release" });
  if ((live || drive.live) && wsSend({ op: "drive", ...s })) drive.sent++;
  drive.live = live;
  showDriveInput(s);
}

// everything let go at once (focus lost, page hidden or closed, Drive off, Esc): deadman 0, then silence
function driveRelease() {
  drive.keys.clear();
  const s = { axes: [0, 0, 0, 0, 0, 0, 0], buttons: [0, drive.fine ? 1 : 0, 0, 0], source: "release" };
  if (drive.live && wsSend({ op: "drive", ...s })) drive.sent++;
  drive.live = false;
  showDriveInput(s);
}

function showDriveInput(s) {
  $("drive-axes").querySelector("tbody").innerHTML = AXES.map((name, i) => {
    const v = s.axes[i];
    const style = v >= 0 ? `left:50%;width:${50 * v}%` : `left:${50 + 50 * v}%;width:${-50 * v}%`;
    return `<tr data-axis="${name}" data-value="${v}"><td>${name}</td><td><div class="axis"><span style="${style}"></span></div></td><td>${fmt(v, 2)}</td></tr>`;
  }).join("");
  $("drive-buttons").innerHTML = BUTTONS.map((name, i) =>
    `<span class="badge" data-button="${name}" data-on="${s.buttons[i]}">${name.replace("_", " ")}</span>`).join("");
  $("drive-deadman").textContent = s.buttons[0] ? "deadman held" : "deadman released";
  $("drive-deadman").className = "badge" + (s.buttons[0] ? " held" : "");
  $("drive-speed").textContent = s.buttons[1] ? "fine" : "coarse";
}

function setDrive(on) {
  if (!on) driveRelease();
  drive.on = on;
  const btn = $("btn-drive");
  btn.textContent = "";
  btn.append(`Drive: ${on ? "on" : "off"} `);
  btn.insertAdjacentHTML("beforeend", "<kbd>v</kbd>");
  btn.classList.toggle("on", on);
  document.body.classList.toggle("driving", on);
  wsSend({ op: "view", mode: on ? "drive" : "watch" });  // the camera at the driving rate while on
  clearInterval(drive.timer);
  drive.timer = on ? setInterval(driveSend, DRIVE_PERIOD_MS) : null;
  if (on) driveSend();
}
$("btn-drive").addEventListener("click", (ev) => { setDrive(!drive.on); ev.currentTarget.blur(); });
window.addEventListener("blur", driveRelease);
window.addEventListener("pagehide", driveRelease);
document.addEventListener("visibilitychange", () => { if (document.hidden) driveRelease(); });
window.addEventListener("gamepadconnected", () => readPad());
window.addEventListener("gamepaddisconnected", () => readPad());

function driveKey(ev, down) {
  if (!drive.on || !DRIVE_CODES.has(ev.code) || ev.ctrlKey || ev.metaKey || ev.altKey) return false;
  ev.preventDefault();  // no scrolling, no button pressed by Space
  if (down && ev.repeat) return true;
  drive.keyAt = Date.now();  // when the newest key event happened (read by the latency benchmark)
  if (ev.code === "KeyZ") { if (down) drive.fine = !drive.fine; }
  else if (down) drive.keys.add(ev.code);
  else drive.keys.delete(ev.code);
  driveSend();
  return true;
}
document.addEventListener("keyup", (ev) => { driveKey(ev, false); });

// ---- controls ---------------------------------------------------------------------------------------------
for (const btn of document.querySelectorAll("button[data-op]")) {
  btn.addEventListener("click", () => send(btn.dataset.op, btn.dataset.task === "1"));
}
const KEYS = { a: "btn-ask", s: "btn-start", y: "btn-save-success", f: "btn-save-failure", d: "btn-discard",
               r: "btn-rerecord", t: "btn-fine-tune", e: "btn-evaluate", x: "btn-stop-all", Escape: "btn-stop-all",
               v: "btn-drive" };
const WHILE_DRIVING = new Set(["y", "x", "Escape", "v"]);  // the round's keys that are not drive keys
document.addEventListener("keydown", (ev) => {
  if (driveKey(ev, true)) return;
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const tag = (ev.target.tagName || "").toLowerCase();
  if ((tag === "select" || tag === "input" || tag === "textarea") && ev.key !== "Escape") return;
  if (drive.on && !WHILE_DRIVING.has(ev.key)) return;
  if (drive.on && (ev.key === "Escape" || ev.key === "x")) driveRelease();
  const id = KEYS[ev.key];
  if (id && !$(id).hidden) { ev.preventDefault(); $(id).click(); }
});
showDriveInput(driveState());

connect();
