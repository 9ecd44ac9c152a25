// The live view's page: polls /live/data every second and draws the last two minutes.
// Plain canvas drawing, no library: nothing outside the machine may be reachable.
"use strict";
(() => {
  const cfg = window.LIVE, T = cfg.texts, POINTS = 120, EVERY_MS = 1000;
  const COLORS = { tokens: "#ffd400", running: "#00e5ff", waiting: "#ffffff", kv: "#ff8a3d",
                   chats: "#7dff7a", ttft: "#ff6bd6" };
  // One colour per model with several served: bright, far apart in hue, readable on black.
  const MODEL_COLORS = ["#ffd400", "#00e5ff", "#ff6bd6", "#7dff7a", "#ff8a3d", "#b9a7ff"];
  const history = { tokens: [], running: [], waiting: [], kv: [], chats: [] };
  const perModel = new Map();  // served name -> its history of tokens, running, waiting, kv
  const $ = (selector) => document.querySelector(selector);
  const locale = cfg.lang === "zh" ? "zh-CN" : "en-US";

  document.title = T.title;
  $("#title").textContent = T.title;
  for (const id of ["tokens", "requests", "kv", "chats", "ttft"]) $(`#${id} h2`).textContent = T[id];

  const fmt = (v, digits = 0) => v == null ? "–"
    : v.toLocaleString(locale, { maximumFractionDigits: digits, minimumFractionDigits: digits });

  function remember(name, value, into = history) {
    const series = into[name];
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
    for (const { data, color, dash } of series) {
      g.strokeStyle = color;
      g.lineWidth = 4;
      g.setLineDash(dash || []);
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

  // The models' histories and the legend naming them (textContent: names are data, not markup).
  function rememberModels(models) {
    models.forEach((m) => {
      if (!perModel.has(m.name)) perModel.set(m.name, { tokens: [], running: [], waiting: [], kv: [] });
      const own = perModel.get(m.name);
      remember("tokens", m.tokens_per_s, own);
      remember("running", m.running, own);
      remember("waiting", m.waiting, own);
      remember("kv", m.kv_cache_pct, own);
    });
    const legend = $("#legend"), names = models.map((m) => m.name);
    if (legend.dataset.names === JSON.stringify(names)) return;
    legend.dataset.names = JSON.stringify(names);
    legend.replaceChildren(...names.map((name, i) => {
      const item = document.createElement("li"), swatch = document.createElement("span");
      swatch.style.background = MODEL_COLORS[i % MODEL_COLORS.length];
      item.append(swatch, document.createTextNode(name));
      return item;
    }));
  }

  // Each model's line of one figure, in its colour (waiting dashed under running).
  function modelSeries(models, name, dash) {
    return models.map((m, i) => ({ data: perModel.get(m.name)[name], color: MODEL_COLORS[i % MODEL_COLORS.length],
                                   dash }));
  }

  function engineNotice(d) {
    if (d.engine_up) return d.metrics ? "" : T.no_metrics;
    const down = (d.models || []).filter((m) => !m.engine_up).map((m) => m.name);
    return d.models && d.models.length > 1 ? `${T.engine_down} (${down.join(", ")})` : T.engine_down;
  }

  function render(d) {
    const running = d.metrics ? d.running : d.streaming;
    const models = d.models || [], several = models.length > 1;
    remember("tokens", d.tokens_per_s);
    remember("running", running);
    remember("waiting", d.waiting);
    remember("kv", d.kv_cache_pct);
    remember("chats", d.chats);
    $("#server").textContent = d.server;
    $("#legend").hidden = !several;
    if (several) rememberModels(models);
    const unknown = cfg.unknown_model || d.unknown_model ? T.unknown_model : "";
    say([unknown, engineNotice(d)].filter(Boolean).join(" "));

    show("tokens", fmt(d.tokens_per_s, 1), d.tokens_per_s);
    show("requests", `${fmt(running)} <small>/</small> ${fmt(d.waiting)}`, running);
    const kvDigits = d.kv_cache_pct != null && d.kv_cache_pct < 1 ? 2 : 1;  // a big pool fills slowly
    show("kv", d.kv_cache_pct == null ? "–" : `${fmt(d.kv_cache_pct, kvDigits)}<small>%</small>`, d.kv_cache_pct);
    show("chats", fmt(d.chats), d.chats);
    const last = d.replies.slice(-20), ttfts = last.map((r) => r.ttft_ms);
    show("ttft", last.length ? `${fmt(ttfts[ttfts.length - 1])}<small> ms</small>` : "–", d.replies_total);

    if (several) {
      lines($("#tokens canvas"), modelSeries(models, "tokens"), "tok/s");
      lines($("#requests canvas"), [...modelSeries(models, "running"), ...modelSeries(models, "waiting", [8, 8])], "");
      lines($("#kv canvas"), modelSeries(models, "kv"), "%", 100);
    } else {
      lines($("#tokens canvas"), [{ data: history.tokens, color: COLORS.tokens }], "tok/s");
      lines($("#requests canvas"), [{ data: history.running, color: COLORS.running },
                                    { data: history.waiting, color: COLORS.waiting }], "");
      lines($("#kv canvas"), [{ data: history.kv, color: COLORS.kv }], "%", 100);
    }
    lines($("#chats canvas"), [{ data: history.chats, color: COLORS.chats }], "");
    bars($("#ttft canvas"), ttfts, COLORS.ttft, "ms");
    $("#ttft-list").replaceChildren(...last.slice(-8).reverse().map((r) => {
      const item = document.createElement("li");
      item.textContent = `${several ? `${r.model} · ` : ""}${fmt(r.ttft_ms)} ms · ${fmt(r.tokens_per_s, 1)} tok/s`;
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
