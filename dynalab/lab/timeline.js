// The report's message timeline: a Lamport diagram of a simulated run, drawn on a canvas.
//
// One lane per process (clients, routers, nodes, replicators), time from left to right, one
// arrow per message from where it left to where it arrived; a message that never arrived ends
// in a cross half-way. Fault windows are shaded across every lane, and more darkly on their
// target's. Marks (a Raft leader and its term, once there are some) are flags on their lane.
// The view is a window of time, zoomed with the wheel, panned by dragging, or typed in; it can
// show one key's messages only, and spread the events of each instant apart ("order"), since in
// simulation a call and its reply often take no virtual time at all. Everything is in this file
// and the page: no network is needed to open a report.
"use strict";

(function () {
  const data = JSON.parse(document.getElementById("timeline-data").textContent);
  const canvas = document.getElementById("timeline-canvas");
  const tip = document.getElementById("timeline-tip");
  const form = document.getElementById("timeline-controls");
  const F = {};
  data.fields.forEach((name, i) => (F[name] = i));
  const lanes = data.lanes;
  const laneOf = new Map(lanes.map((lane, i) => [lane, i]));
  const messages = data.messages;
  const LANE_PX = 26;
  const TOP_PX = 28;
  const LEFT_PX = 92;
  const RIGHT_PX = 12;
  const ARROWHEADS_MAX = 1500; // Past this many arrows in view, heads are left off.
  const COLOURS = {
    request: "#1f77b4",
    reply: "#2ca02c",
    replyError: "#ff7f0e",
    batch: "#9467bd",
    lost: "#d62728",
  };
  const height = TOP_PX + lanes.length * LANE_PX + 10;
  const ratio = window.devicePixelRatio || 1;
  canvas.style.height = height + "px";
  const width = canvas.clientWidth || 1060;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const context = canvas.getContext("2d");
  context.scale(ratio, ratio);

  const view = {
    start: data.view.start_s,
    end: data.view.end_s,
    key: data.view.key || "",
    order: Boolean(data.view.order),
    background: true,
  };
  let drawn = []; // [x1, y1, x2, y2, message] of what is on the canvas, for the tooltip.

  function laneY(lane) {
    const index = laneOf.has(lane) ? laneOf.get(lane) : lanes.length - 1;
    return TOP_PX + index * LANE_PX + LANE_PX / 2;
  }

  function selected() {
    return messages.filter((m) => {
      const arrived = m[F.arrived_s] === null ? m[F.sent_s] : m[F.arrived_s];
      if (m[F.sent_s] > view.end || arrived < view.start) return false;
      if (view.key && !m[F.keys].includes(view.key)) return false;
      if (!view.background && m[F.process] === null) return false;
      return true;
    });
  }

  // Where an instant is drawn: proportional to time, or, in order mode, by the rank of the
  // events (sends and arrivals) in view, so that those of one instant stand apart in the order
  // they happened.
  function scale(shown) {
    const plotWidth = width - LEFT_PX - RIGHT_PX;
    if (!view.order) {
      const span = Math.max(view.end - view.start, 1e-9);
      return {
        send: (i) => LEFT_PX + ((shown[i][F.sent_s] - view.start) / span) * plotWidth,
        arrive: (i) => LEFT_PX + ((shown[i][F.arrived_s] - view.start) / span) * plotWidth,
        time: (t) => LEFT_PX + ((t - view.start) / span) * plotWidth,
        at: (x) => view.start + ((x - LEFT_PX) / plotWidth) * span,
      };
    }
    const events = [];
    shown.forEach((m, i) => {
      events.push([m[F.sent_s], i, 0]);
      if (m[F.arrived_s] !== null) events.push([m[F.arrived_s], i, 1]);
    });
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
    const step = plotWidth / Math.max(events.length, 1);
    const sendX = new Array(shown.length);
    const arriveX = new Array(shown.length);
    events.forEach(([, i, kind], rank) => {
      (kind === 0 ? sendX : arriveX)[i] = LEFT_PX + (rank + 0.5) * step;
    });
    const times = events.map((e) => e[0]);
    function time(t) {
      // The first event at or after t (a fault window's edge falls between events).
      let low = 0;
      let high = times.length;
      while (low < high) {
        const middle = (low + high) >> 1;
        if (times[middle] < t) low = middle + 1;
        else high = middle;
      }
      return LEFT_PX + low * step;
    }
    return {
      send: (i) => sendX[i],
      arrive: (i) => arriveX[i],
      time,
      at: (x) => {
        const rank = Math.min(times.length - 1, Math.max(0, Math.floor((x - LEFT_PX) / step)));
        return times.length ? times[rank] : view.start;
      },
    };
  }

  function colour(m) {
    if (m[F.arrived_s] === null) return COLOURS.lost;
    if (m[F.kind] === "batch") return COLOURS.batch;
    if (m[F.kind] === "reply") return m[F.fate] === "ok" ? COLOURS.reply : COLOURS.replyError;
    return COLOURS.request;
  }

  function arrowhead(x1, y1, x2, y2) {
    const angle = Math.atan2(y2 - y1, x2 - x1);
    context.beginPath();
    context.moveTo(x2, y2);
    context.lineTo(x2 - 7 * Math.cos(angle - 0.4), y2 - 7 * Math.sin(angle - 0.4));
    context.lineTo(x2 - 7 * Math.cos(angle + 0.4), y2 - 7 * Math.sin(angle + 0.4));
    context.closePath();
    context.fill();
  }

  function draw() {
    const shown = selected();
    const x = scale(shown);
    context.clearRect(0, 0, width, height);
    context.font = "11px sans-serif";
    context.textBaseline = "middle";
    const right = width - RIGHT_PX;
    // Fault windows: across every lane, and darker on the target's.
    for (const w of data.windows) {
      const x1 = Math.max(LEFT_PX, x.time(w.start_s));
      const x2 = Math.min(right, x.time(w.end_s));
      if (x2 <= x1) continue;
      context.globalAlpha = 0.15;
      context.fillStyle = w.colour;
      context.fillRect(x1, TOP_PX, x2 - x1, lanes.length * LANE_PX);
      context.globalAlpha = 0.2;
      for (const lane of w.lanes) {
        context.fillRect(x1, laneY(lane) - LANE_PX / 2, x2 - x1, LANE_PX);
      }
      context.globalAlpha = 1;
      context.fillStyle = w.colour;
      context.fillText(w.label, x1 + 3, TOP_PX - 8);
    }
    // Lanes.
    context.strokeStyle = "#bbb";
    context.lineWidth = 1;
    lanes.forEach((lane) => {
      const y = laneY(lane);
      context.beginPath();
      context.moveTo(LEFT_PX, y);
      context.lineTo(right, y);
      context.stroke();
      context.fillStyle = "#222";
      context.fillText(lane === "client-0" ? "final reads" : lane, 4, y);
    });
    // Time ticks.
    context.fillStyle = "#555";
    const ticks = 8;
    for (let i = 0; i <= ticks; i++) {
      const px = LEFT_PX + ((right - LEFT_PX) * i) / ticks;
      const t = x.at(px);
      context.fillRect(px, TOP_PX - 3, 1, 3);
      context.fillText(t.toFixed(3) + " s", Math.min(px, right - 50), 8);
    }
    // Messages, clipped to the plot: one sent before the window starts comes in from its edge.
    context.save();
    context.beginPath();
    context.rect(LEFT_PX, 0, right - LEFT_PX, height);
    context.clip();
    drawn = [];
    const heads = shown.length <= ARROWHEADS_MAX;
    context.lineWidth = 1.2;
    shown.forEach((m, i) => {
      const x1 = x.send(i);
      const y1 = laneY(m[F.source]);
      const y2full = laneY(m[F.destination]);
      const lost = m[F.arrived_s] === null;
      const x2 = lost ? x1 + 6 : x.arrive(i);
      const y2 = lost ? (y1 + y2full) / 2 : y2full;
      context.strokeStyle = context.fillStyle = colour(m);
      context.beginPath();
      context.moveTo(x1, y1);
      context.lineTo(x2, y2);
      context.stroke();
      if (lost) {
        context.beginPath();
        context.moveTo(x2 - 4, y2 - 4);
        context.lineTo(x2 + 4, y2 + 4);
        context.moveTo(x2 - 4, y2 + 4);
        context.lineTo(x2 + 4, y2 - 4);
        context.stroke();
      } else if (heads) {
        arrowhead(x1, y1, x2, y2);
      }
      drawn.push([x1, y1, x2, y2, m]);
    });
    context.restore();
    // Marks: a flag on the lane, and its label.
    for (const mark of data.marks) {
      if (mark.at_s < view.start || mark.at_s > view.end) continue;
      const px = x.time(mark.at_s);
      const y = laneY(mark.lane);
      context.fillStyle = "#000";
      context.fillRect(px, y - LANE_PX / 2 + 2, 2, LANE_PX - 4);
      context.beginPath();
      context.moveTo(px + 2, y - LANE_PX / 2 + 2);
      context.lineTo(px + 10, y - LANE_PX / 2 + 6);
      context.lineTo(px + 2, y - LANE_PX / 2 + 10);
      context.fill();
      context.fillText(mark.label, px + 12, y - LANE_PX / 2 + 7);
    }
    document.getElementById("timeline-count").textContent =
      shown.length + " of " + messages.length + " messages";
    form.elements.start.value = view.start.toFixed(3);
    form.elements.end.value = view.end.toFixed(3);
  }

  function nearest(px, py) {
    let best = null;
    let bestDistance = 6;
    for (const [x1, y1, x2, y2, m] of drawn) {
      const dx = x2 - x1;
      const dy = y2 - y1;
      const length = dx * dx + dy * dy;
      const t = length ? Math.max(0, Math.min(1, ((px - x1) * dx + (py - y1) * dy) / length)) : 0;
      const distance = Math.hypot(px - (x1 + t * dx), py - (y1 + t * dy));
      if (distance < bestDistance) {
        best = m;
        bestDistance = distance;
      }
    }
    return best;
  }

  function describe(m) {
    const arrived = m[F.arrived_s] === null ? "never arrived" : "arrived " + m[F.arrived_s].toFixed(6) + " s";
    const serving = m[F.process] === null ? "" : "\nserving client " + m[F.process] + " " + m[F.keys].join(", ");
    const detail = m[F.detail] ? " (" + m[F.detail] + ")" : "";
    return (
      m[F.kind] + " " + m[F.op] + detail + ": " + m[F.source] + " \u2192 " + m[F.destination] +
      "\nsent " + m[F.sent_s].toFixed(6) + " s, " + arrived + ": " + m[F.fate] + serving
    );
  }

  canvas.addEventListener("mousemove", (event) => {
    const box = canvas.getBoundingClientRect();
    const m = nearest(event.clientX - box.left, event.clientY - box.top);
    if (drag !== null) return;
    if (m === null) {
      tip.style.display = "none";
      return;
    }
    tip.textContent = describe(m);
    tip.style.display = "block";
    tip.style.left = event.pageX + 12 + "px";
    tip.style.top = event.pageY + 12 + "px";
  });
  canvas.addEventListener("mouseleave", () => (tip.style.display = "none"));

  canvas.addEventListener("wheel", (event) => {
    event.preventDefault();
    const box = canvas.getBoundingClientRect();
    const shown = selected();
    const at = scale(shown).at(event.clientX - box.left);
    const factor = event.deltaY < 0 ? 0.7 : 1 / 0.7;
    view.start = at - (at - view.start) * factor;
    view.end = at + (view.end - at) * factor;
    draw();
  });

  let drag = null;
  canvas.addEventListener("mousedown", (event) => (drag = [event.clientX, view.start, view.end]));
  window.addEventListener("mouseup", () => (drag = null));
  window.addEventListener("mousemove", (event) => {
    if (drag === null) return;
    const span = drag[2] - drag[1];
    const shift = ((drag[0] - event.clientX) / (width - LEFT_PX - RIGHT_PX)) * span;
    view.start = drag[1] + shift;
    view.end = drag[2] + shift;
    draw();
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const start = parseFloat(form.elements.start.value);
    const end = parseFloat(form.elements.end.value);
    if (Number.isFinite(start) && Number.isFinite(end) && end > start) {
      view.start = start;
      view.end = end;
    }
    view.key = form.elements.key.value;
    view.order = form.elements.order.checked;
    view.background = form.elements.background.checked;
    draw();
  });
  for (const name of ["key", "order", "background"]) {
    form.elements[name].addEventListener("change", () => form.requestSubmit());
  }
  document.getElementById("timeline-all").addEventListener("click", () => {
    view.start = data.extent.start_s;
    view.end = data.extent.end_s;
    draw();
  });

  // Links elsewhere in the page ("messages of this key", a fault window) set the view.
  window.dynalabTimeline = function (start, end, key) {
    view.start = start;
    view.end = end;
    if (key !== undefined) {
      view.key = key;
      form.elements.key.value = key;
    }
    draw();
    canvas.scrollIntoView();
  };

  form.elements.key.value = view.key;
  form.elements.order.checked = view.order;
  form.elements.background.checked = view.background;
  draw();
})();
