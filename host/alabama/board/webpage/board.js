// The virtual board's page (alabama.board.web serves it on 127.0.0.1). One websocket, /ws: JSON events
// from the board (log, led, frame, panel, speaker, state, mic, button, error) and binary speaker PCM; it
// sends {"cmd": ...} and, while the button is held with this browser's microphone chosen, binary
// microphone PCM (s16le mono 16 kHz). window.alabama exposes what the page saw (for tests and curious
// users): ledHistory (every phase heard), ledShown ([phase, ms] as the ring showed them), speakerSamples,
// micSamples, micLoud (of those, the ones sent in blocks louder than -40 dBFS), panelLoads, panelSeq (the
// framebuffer seq shown), panelScale, errors.
"use strict";

const MIC_RATE = 16000;
let LOG_KEEP = 2000;            // the server says how much history it keeps (hello.keep)
let ROWS_KEEP = 2000;
// A phase the board passes through faster than an eye can see (PROCESSING lasts ~1 ms with the echo brain)
// is held this long on the ring; the phases after it follow in order, and the timeline keeps the real times.
const PHASE_MIN_MS = 700;
const NAMES = {"tx": "Sat → Core", "rx": "Core → Sat"};

const $ = (id) => document.getElementById(id);
const seen = window.alabama = {ledHistory: [], ledShown: [], speakerSamples: 0, micSamples: 0, micLoud: 0,
                                panelLoads: 0, panelSeq: 0, panelScale: 0, errors: []};

let ws = null;
let pressed = false;
let micSource = "silence";
let audio = null;               // the AudioContext (speaker and microphone)
let spkRate = 16000, spkNext = 0;
let micNode = null, micStream = null;
let lp = 0, rsT = 0, rsLast = 0;

// ------------------------------------------------------------------------------------- the LED ring
(function buildRing() {
  const leds = $("leds");
  for (let i = 0; i < 12; i++) {
    const s = document.createElement("span");
    s.style.transform = "rotate(" + (i * 30) + "deg) translate(0, -62px)";
    s.style.animationDelay = (i * 0.1) + "s";
    leds.appendChild(s);
  }
})();

let ledQueue = [], ledUntil = 0, ledTimer = null;
function setLed(phase) {
  if (phase && seen.ledHistory[seen.ledHistory.length - 1] !== phase) seen.ledHistory.push(phase);
  ledQueue.push(phase);
  showLed();
}

function showLed() {
  const now = performance.now();
  if (ledTimer || !ledQueue.length) return;
  if (now < ledUntil) { ledTimer = setTimeout(() => { ledTimer = null; showLed(); }, ledUntil - now); return; }
  const phase = ledQueue.shift();
  $("ring").dataset.phase = phase || "NONE";
  $("phase").textContent = phase || "–";
  if (phase) seen.ledShown.push([phase, Math.round(now)]);
  ledUntil = now + (phase === "PROCESSING" ? PHASE_MIN_MS : 0);
  showLed();
}

// ------------------------------------------------------------------------------------- log and timeline
function addLog(ms, line) {
  const el = $("log");
  const atEnd = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
  el.appendChild(document.createTextNode(fmtMs(ms) + "  " + line + "\n"));
  while (el.childNodes.length > LOG_KEEP) el.removeChild(el.firstChild);
  if (atEnd) el.scrollTop = el.scrollHeight;
}

function fmtMs(ms) { return (ms / 1000).toFixed(3).padStart(8, " ") + "s"; }
function opName(op) { return op.split("_").map((p) => p.charAt(0).toUpperCase() + p.slice(1)).join(""); }

// StreamChunk runs are collapsed by the server (its first chunk a row, the rest one row it counts, sent
// again with the same `run` number as it grows), as in the spec's §4 examples.
let runRows = new Map();
let lastRow = null;             // the newest frame row (a PipelineState row gets the phase the LED shows)
function addFrame(f) {
  const body = $("timeline").tBodies[0];
  const box = body.parentNode.parentNode;
  const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  if (f.more != null) {
    let tr = runRows.get(f.run);
    if (!tr || !tr.isConnected) { tr = row(body, "run " + f.dir, ["", "⋯", "", ""]); runRows.set(f.run, tr); }
    tr.cells[3].textContent = "(" + f.more + " more StreamChunk frame" + (f.more === 1 ? "" : "s") + " on id " + f.id +
      ", to " + fmtMs(f.to_ms != null ? f.to_ms : f.ms).trim() + ")";
    if (atEnd) box.scrollTop = box.scrollHeight;
    return;
  }
  lastRow = row(body, f.dir, [fmtMs(f.ms), NAMES[f.dir] || f.dir, opName(f.op),
                              "{id " + f.id + (f.detail ? ", " + f.detail : "") + "}"]);
  lastRow.dataset.op = f.op;
  lastRow.dataset.detail = f.detail || "";
  while (body.rows.length > ROWS_KEEP) body.deleteRow(0);
  if (atEnd) box.scrollTop = box.scrollHeight;
}

function row(body, cls, cells) {
  const tr = body.insertRow();
  tr.className = cls;
  cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i === 0) td.className = "t";
                            if (i === 1) td.className = "dir"; });
  return tr;
}

// ------------------------------------------------------------------------------------- panel
let panelWant = 0, panelBusy = false;
// The framebuffer is drawn at a whole scale (1x, 2x, ...: the largest the column allows), never a fraction:
// a fractional scale drops or doubles pixel columns of the 8-pixel glyphs ("quick" read "quıck").
let panelSize = null;
function showPanel(size, v) {
  if (!size) return;
  $("panel-box").hidden = false;
  $("no-panel").hidden = true;
  panelSize = size;
  scalePanel();
  if (v) { panelWant = Math.max(panelWant, v); loadPanel(); }
}

function scalePanel() {
  if (!panelSize) return;
  const box = $("panel-box"), cs = getComputedStyle(box);
  const room = $("device").clientWidth - 2 * 10 - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) -
               parseFloat(cs.borderLeftWidth) - parseFloat(cs.borderRightWidth);
  const k = Math.max(1, Math.floor(room / panelSize[0]));
  const img = $("panel");
  img.style.width = (k * panelSize[0]) + "px";
  img.style.height = (k * panelSize[1]) + "px";
  seen.panelScale = k;
  $("panel-size").textContent = panelSize[0] + " × " + panelSize[1] + (k > 1 ? " at " + k + "×" : "");
}
window.addEventListener("resize", scalePanel);

// Pictures are fetched one at a time, the newest wanted next: a fast painter never queues stale ones.
async function loadPanel() {
  if (panelBusy) return;
  panelBusy = true;
  try {
    while (panelWant) {
      const v = panelWant;
      panelWant = 0;
      const resp = await fetch("/panel.png?v=" + v, {cache: "no-store"});
      if (!resp.ok) continue;
      const seq = Number(resp.headers.get("X-Panel-Seq"));
      const url = URL.createObjectURL(await resp.blob());
      const img = $("panel");
      await new Promise((ok) => { img.onload = ok; img.onerror = ok; img.src = url; });
      const old = img.dataset.url;
      if (old) URL.revokeObjectURL(old);
      img.dataset.url = url;
      img.dataset.seq = String(seq);
      seen.panelSeq = seq;
      seen.panelLoads += 1;
    }
  } finally {
    panelBusy = false;
  }
}

// ------------------------------------------------------------------------------------- speaker
function ensureAudio() {
  if (!audio) audio = new AudioContext();
  if (audio.state === "suspended") audio.resume();
  return audio;
}

function playPcm(buf) {
  const s = new Int16Array(buf);
  seen.speakerSamples += s.length;
  $("spk").textContent = "played " + (seen.speakerSamples / spkRate).toFixed(2) + " s at " + spkRate + " Hz";
  if (!$("play").checked || !s.length) return;
  const ctx = ensureAudio();
  const ab = ctx.createBuffer(1, s.length, spkRate);
  const d = ab.getChannelData(0);
  for (let i = 0; i < s.length; i++) d[i] = s[i] / 32768;
  const src = ctx.createBufferSource();
  src.buffer = ab;
  src.connect(ctx.destination);
  const t = Math.max(ctx.currentTime + 0.08, spkNext);
  src.start(t);
  spkNext = t + ab.duration;
}

// ------------------------------------------------------------------------------------- microphone
const TAP = "class Tap extends AudioWorkletProcessor { process(inputs) { const c = inputs[0] && inputs[0][0]; " +
            "if (c) this.port.postMessage(c.slice(0)); return true; } } registerProcessor('alabama-mic', Tap);";

async function startMic() {
  if (micNode) return;
  const ctx = ensureAudio();
  micStream = await navigator.mediaDevices.getUserMedia({audio: {channelCount: 1, echoCancellation: true}});
  const url = URL.createObjectURL(new Blob([TAP], {type: "application/javascript"}));
  await ctx.audioWorklet.addModule(url);
  const src = ctx.createMediaStreamSource(micStream);
  micNode = new AudioWorkletNode(ctx, "alabama-mic");
  micNode.port.onmessage = (e) => onMicBlock(e.data, ctx.sampleRate);
  src.connect(micNode);
}

// Block of float samples at the context's rate -> s16le at 16 kHz (one-pole low-pass, linear interpolation).
function onMicBlock(x, rate) {
  const step = rate / MIC_RATE;
  const a = 1 - Math.exp(-2 * Math.PI * 7000 / rate);
  const y = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) { lp += a * (x[i] - lp); y[i] = lp; }
  const out = [];
  let sum = 0;
  while (rsT < y.length) {
    const i = Math.floor(rsT), f = rsT - i;
    const v0 = i < 0 ? rsLast : y[i], v1 = i + 1 < y.length ? y[i + 1] : y[i];
    const v = Math.max(-1, Math.min(1, v0 + (v1 - v0) * f));
    out.push(Math.round(v * 32767));
    sum += v * v;
    rsT += step;
  }
  rsT -= y.length;
  rsLast = y[y.length - 1];
  if (out.length) $("mic-level").firstChild.style.width = Math.min(100, 400 * Math.sqrt(sum / out.length)) + "%";
  if (!pressed || micSource !== "browser" || !ws || ws.readyState !== WebSocket.OPEN || !out.length) return;
  ws.send(new Int16Array(out).buffer);
  seen.micSamples += out.length;
  if (sum / out.length > 1e-4) seen.micLoud += out.length;
}

// ------------------------------------------------------------------------------------- the button
async function press() {
  if (pressed) return;
  ensureAudio();
  if (micSource === "browser") {
    try { await startMic(); } catch (e) { error("the browser's microphone is not available: " + e); }
  }
  pressed = true;
  $("ptt").setAttribute("aria-pressed", "true");
  send({cmd: "press"});
}

function release() {
  if (!pressed) return;
  pressed = false;
  $("ptt").setAttribute("aria-pressed", "false");
  send({cmd: "release"});
}

const ptt = $("ptt");
ptt.addEventListener("pointerdown", (e) => { ptt.setPointerCapture(e.pointerId); press(); });
ptt.addEventListener("pointerup", release);
ptt.addEventListener("pointercancel", release);
document.addEventListener("keydown", (e) => { if (e.code === "Space" && !e.repeat && e.target.tagName !== "INPUT") { e.preventDefault(); press(); } });
document.addEventListener("keyup", (e) => { if (e.code === "Space") { e.preventDefault(); release(); } });
$("long").addEventListener("click", () => send({cmd: "long"}));

for (const r of document.querySelectorAll("input[name=mic]")) {
  r.addEventListener("change", () => { if (r.checked) send({cmd: "mic", source: r.value}); });
}
$("wav").addEventListener("change", async () => {
  const f = $("wav").files[0];
  if (!f) return;
  const resp = await fetch("/mic?name=" + encodeURIComponent(f.name), {method: "POST", body: f});
  const j = await resp.json();
  if (!resp.ok) error(j.error); else setMic(j);
});

function setMic(m) {
  micSource = m.source;
  for (const r of document.querySelectorAll("input[name=mic]")) r.checked = r.value === m.source;
  $("wav-name").textContent = m.wav ? m.wav + (m.seconds ? " (" + m.seconds + " s)" : "") : "";
}

function error(text) {
  seen.errors.push(text);
  $("error").textContent = text;
}

// ------------------------------------------------------------------------------------- the websocket
function send(obj) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj));
}

function setState(st) {
  if (!st) return;
  $("conn").dataset.state = st.state;
  $("conn").textContent = "board " + st.state + (st.pattern ? " (Noise " + st.pattern + ")" : "");
  $("heap").textContent = st.heap_free != null ? "heap " + kb(st.heap_free) + " free" +
    (st.heap_min != null ? " (lowest " + kb(st.heap_min) + ")" : "") : "";
  const ambient = !!(st.settings && st.settings.capture_mode === "ambient");
  $("mode").hidden = !ambient;
  $("mode-note").hidden = !ambient;
  $("ptt").dataset.mode = ambient ? "ambient" : "ptt";
  if (st.light != null) {          // the simulated lamp (hal/sim.py light.set): shown once the HAL reports one
    $("lamp").hidden = false;
    $("lamp").dataset.state = st.light ? "on" : "off";
    $("lamp").textContent = "light " + (st.light ? "on" : "off");
  }
}

function kb(n) {
  return (n / 1024).toFixed(1) + " KB";
}

function onEvent(ev) {
  switch (ev.t) {
    case "hello":
      // the board's name may carry its own brackets ("Virtual board (MicroPython unix port, ...)"): never nest them
      $("board-name").textContent = ev.board + (ev.board_name ? " · " + ev.board_name : "");
      $("board-name").title = $("board-name").textContent;
      document.title = ev.board + " – Alabama virtual board";
      if (ev.keep) {
        LOG_KEEP = ev.keep.log;
        ROWS_KEEP = ev.keep.timeline;
        $("log-keep").textContent = "(the board's last " + LOG_KEEP + " lines, from its boot)";
        $("timeline-keep").textContent = "(as the board sent and received them: the last " + ROWS_KEEP + ")";
      }
      $("log").textContent = "";
      $("timeline").tBodies[0].textContent = "";
      runRows = new Map();
      lastRow = null;
      ev.log.forEach((l) => addLog(l.ms, l.line));
      ev.timeline.forEach(addFrame);
      setLed(ev.led);
      showPanel(ev.panel, ev.panel_v || (ev.panel ? 1 : 0));
      setMic(ev.mic);
      setState(ev.state);
      break;
    case "log": addLog(ev.ms, ev.line); break;
    case "led":
      setLed(ev.phase);
      if (lastRow && lastRow.dataset.op === "pipeline_state" && !lastRow.dataset.detail) {
        lastRow.dataset.detail = ev.phase;
        lastRow.cells[3].textContent = lastRow.cells[3].textContent.replace("}", ", " + ev.phase + "}");
      }
      break;
    case "frame": addFrame(ev); break;
    case "panel": showPanel(ev.size, ev.v); break;
    case "speaker": spkRate = ev.rate; spkNext = 0; break;
    case "state": setState(ev.state); break;
    case "mic": setMic(ev); break;
    case "button": break;
    case "error": error(ev.error); break;
  }
}

function connect() {
  ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { $("link").dataset.state = "online"; $("link").textContent = "page online"; };
  ws.onmessage = (m) => { if (typeof m.data === "string") onEvent(JSON.parse(m.data)); else playPcm(m.data); };
  ws.onclose = () => {
    $("link").dataset.state = "offline";
    $("link").textContent = "page offline (is `alabama board sim --web` running?)";
    if (pressed) { pressed = false; $("ptt").setAttribute("aria-pressed", "false"); }
    setTimeout(connect, 1000);
  };
}
connect();
