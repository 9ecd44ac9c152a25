// The live view's page: polls /live/data every second and draws the last two minutes.
// Plain canvas drawing, no library: nothing outside the machine may be reachable.
"use strict";
(() => {
  const cfg = window.LIVE, T = cfg.texts, POINTS = 120, EVERY_MS = 1000;
  const COLORS = { tokens: "#ffd400", running: "#00e5ff", waiting: "#ffffff", kv: "#ff8a3d",
                   chats: "#7dff7a", ttft: "#ff6bd6" };
  const history = { tokens: [], running: [], waiting: [], kv: [], chats: [] };
  const $ = (selector) => document.querySelector(selector);
  const locale = cfg.lang === "zh" ? "zh-CN" : "en-US";

  document.title = T.title;
  $("#title").textContent = T.title;
  for (const id of ["tokens", "requests", "kv", "chats", "ttft"]) $(`#${id} h2`).textContent = T[id];

  const fmt = (v, digits = 0) => v == null ? "–"
    : v.toLocaleString(locale, { maximumFractionDigits: digits, minimumFractionDigits: digits });

  function remember(name, value) {
    const series = history[name];
    series.push(value);
    if (series.length > POINTS) series.shift();
  }

  // A canvas sized to its box in device pixels, with its drawing context and size.
  function surface(canvas) {
    const ratio = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
    canvas.width = Math.max(1, w * ratio);
    canvas.height = Math.max(1, h * ratio);
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    const size = Math.max(14, Math.round(h * 0.12));
    g.font = `${size}px sans-serif`;
    g.textBaseline = "top";
    return { g, w, h, room: h - size - 10 };  // room: the plot's height under the scale's label
  }

  // The scale's top: a round number above the largest value (or the fixed top given).
  function topOf(values, fixed) {
    if (fixed) return fixed;
    const most = Math.max(1e-9, ...values);
    const step = 10 ** Math.floor(Math.log10(most));
    return [1, 2, 5, 10].map((m) => m * step).find((t) => t >= most * 1.1) || most * 1.1;
  }

  function frame(g, w, h, top, unit) {
    g.strokeStyle = "#666";
    g.lineWidth = 1;
    g.beginPath(); g.moveTo(0, h - 1); g.lineTo(w, h - 1); g.moveTo(0, 0); g.lineTo(w, 0); g.stroke();
    g.fillStyle = "#bbb";
    g.fillText(`${fmt(top, Number.isInteger(top) ? 0 : 1)} ${unit}`, 4, 4);
  }

  function lines(canvas, series, unit, fixedTop) {
    const { g, w, h, room } = surface(canvas);
    const top = topOf(series.flatMap((s) => s.data.filter((v) => v != null)), fixedTop);
    frame(g, w, h, top, unit);
    for (const { data, color } of series) {
      g.strokeStyle = color;
      g.lineWidth = 4;
      g.beginPath();
      let pen = false;
      data.forEach((v, i) => {
        if (v == null) { pen = false; return; }
        const x = w - (data.length - 1 - i) * (w / (POINTS - 1)), y = h - 2 - (v / top) * room;
        if (pen) g.lineTo(x, y); else g.moveTo(x, y);
        pen = true;
      });
      g.stroke();
    }
  }

  function bars(canvas, values, color, unit) {
    const { g, w, h, room } = surface(canvas);
    const top = topOf(values);
    frame(g, w, h, top, unit);
    const slot = w / Math.max(values.length, 10);
    g.fillStyle = color;
    values.forEach((v, i) => {
      const height = (v / top) * room;
      g.fillRect(i * slot + slot * 0.15, h - 1 - height, slot * 0.7, height);
    });
  }

  function show(id, html, value) {
    const tile = $(`#${id}`);
    tile.querySelector(".value").innerHTML = html;
    tile.dataset.value = value == null ? "" : String(value);
  }

  function say(message) {
    const notice = $("#notice");
    notice.hidden = !message;
    notice.textContent = message || "";
  }

  function render(d) {
    const running = d.metrics ? d.running : d.streaming;
    remember("tokens", d.tokens_per_s);
    remember("running", running);
    remember("waiting", d.waiting);
    remember("kv", d.kv_cache_pct);
    remember("chats", d.chats);
    $("#server").textContent = d.server;
    say(!d.engine_up ? T.engine_down : d.metrics ? "" : T.no_metrics);

    show("tokens", fmt(d.tokens_per_s, 1), d.tokens_per_s);
    show("requests", `${fmt(running)} <small>/</small> ${fmt(d.waiting)}`, running);
    const kvDigits = d.kv_cache_pct != null && d.kv_cache_pct < 1 ? 2 : 1;  // a big pool fills slowly
    show("kv", d.kv_cache_pct == null ? "–" : `${fmt(d.kv_cache_pct, kvDigits)}<small>%</small>`, d.kv_cache_pct);
    show("chats", fmt(d.chats), d.chats);
    const last = d.replies.slice(-20), ttfts = last.map((r) => r.ttft_ms);
    show("ttft", last.length ? `${fmt(ttfts[ttfts.length - 1])}<small> ms</small>` : "–", d.replies_total);

    lines($("#tokens canvas"), [{ data: history.tokens, color: COLORS.tokens }], "tok/s");
    lines($("#requests canvas"), [{ data: history.running, color: COLORS.running },
                                  { data: history.waiting, color: COLORS.waiting }], "");
    lines($("#kv canvas"), [{ data: history.kv, color: COLORS.kv }], "%", 100);
    lines($("#chats canvas"), [{ data: history.chats, color: COLORS.chats }], "");
    bars($("#ttft canvas"), ttfts, COLORS.ttft, "ms");
    $("#ttft-list").replaceChildren(...last.slice(-8).reverse().map((r) => {
      const item = document.createElement("li");
      item.textContent = `${fmt(r.ttft_ms)} ms · ${fmt(r.tokens_per_s, 1)} tok/s`;
      return item;
    }));
  }

  let busy = false;  // a slow answer must not pile polls up behind it
  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const response = await fetch(cfg.data, { credentials: "include", cache: "no-store" });
      if (response.status === 401) say(T.login);
      else if (!response.ok) say(T.app_down);
      else render(await response.json());
    } catch (error) {
      say(T.app_down);
    } finally {
      busy = false;
    }
  }
  poll();
  setInterval(poll, EVERY_MS);
})();
