// bootserver's live page: applies the Server-Sent Events of /ui/events to the rows and counts the server
// rendered, filters rows as you type, and recomputes ages and stalls locally (no polling of the server).
"use strict";
(() => {
  const live = document.getElementById("live");
  const fleet = document.getElementById("fleet");
  const nodeLive = document.getElementById("node-live");
  const now = () => Date.now() / 1000;
  const num = (v) => (v === "" || v === undefined || v === null ? NaN : Number(v));

  function age(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 120) return s + "s";
    if (s < 7200) return Math.floor(s / 60) + "m";
    if (s < 172800) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }

  function cell(tr, name) { return tr.querySelector('[data-f="' + name + '"]'); }

  // The Discovered table: every value a machine reported goes in as text (textContent), never as markup.
  const discovered = document.getElementById("discovered");
  function showDiscovered(list) {
    const body = document.createElement("tbody");
    for (const d of list) {
      const tr = document.createElement("tr");
      tr.dataset.mac = d.mac;
      if (d.conflict) tr.className = "conflict";
      const f = d.facts || {};
      const cells = [d.mac, d.uuid || "-", f.manufacturer || "-", f.product || "-", f.serial || "-", d.arch || "-",
                     (d.addresses || []).join(", ") + (d.conflict ? " (conflict: " + d.addresses.length +
                     " addresses claim this MAC)" : "") || "-", age(now() - d.first_seen) + " ago", age(now() - d.last_seen) + " ago",
                     String(d.reports)];
      cells.forEach((text, i) => {
        const td = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) td.scope = "row";
        td.textContent = text;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    discovered.replaceChild(body, discovered.tBodies[0]);
    document.getElementById("discovered-count").textContent = String(list.length);
    document.getElementById("discovered-none").hidden = list.length > 0;
  }

  function refreshRow(tr) {
    const t = now();
    const stageAt = num(tr.dataset.stageAt), stallAt = num(tr.dataset.stallAt), lastAt = num(tr.dataset.lastAt);
    cell(tr, "since").textContent = isNaN(stageAt) ? "-" : age(t - stageAt) + " ago";
    const late = !isNaN(stallAt) && t >= stallAt;
    tr.classList.toggle("stalled", late);
    const stalled = cell(tr, "stalled");
    stalled.textContent = "";
    if (late) {
      const span = document.createElement("span");
      span.className = "bad";
      span.textContent = "stalled " + age(t - stallAt);
      stalled.appendChild(span);
    } else {
      stalled.textContent = "-";
    }
    const lastAge = cell(tr, "last-age");
    if (lastAge && !isNaN(lastAt)) lastAge.textContent = age(t - lastAt) + " ago";
  }

  const timers = new Map();
  function scheduleStall(tr) {
    clearTimeout(timers.get(tr));
    const stallAt = num(tr.dataset.stallAt);
    if (!isNaN(stallAt) && stallAt > now()) {
      timers.set(tr, setTimeout(() => { refreshRow(tr); counts(); }, (stallAt - now()) * 1000 + 50));
    }
  }

  function rows() { return fleet ? Array.from(fleet.tBodies[0].rows) : []; }

  function filterValues() {
    const stage = document.getElementById("stage"), q = document.getElementById("q");
    return [stage ? stage.value : "", q ? q.value.trim().toLowerCase() : ""];
  }

  function matches(tr, stage, q) {
    if (stage && tr.dataset.stage !== stage) return false;
    if (!q) return true;
    return tr.dataset.node.toLowerCase().includes(q) || tr.dataset.macs.toLowerCase().includes(q);
  }

  function counts() {
    const by = {};
    let stalled = 0, shown = 0;
    const [stage, q] = filterValues();
    for (const tr of rows()) {
      by[tr.dataset.stage] = (by[tr.dataset.stage] || 0) + 1;
      if (tr.classList.contains("stalled")) stalled += 1;
      tr.hidden = !matches(tr, stage, q);
      if (!tr.hidden) shown += 1;
    }
    for (const a of document.querySelectorAll("[data-count]")) {
      a.querySelector("b").textContent = by[a.dataset.count] || 0;
    }
    const sc = document.getElementById("stalled-count");
    if (sc) { sc.textContent = stalled; sc.classList.toggle("bad", stalled > 0); }
    const sh = document.getElementById("shown");
    if (sh) sh.textContent = shown;
    const none = document.getElementById("none");
    if (none) none.hidden = shown > 0;
  }

  function updateRow(r) {
    const tr = document.getElementById("node-" + r.node);
    if (!tr) return;
    tr.dataset.stage = r.stage;
    tr.dataset.stageAt = r.stage_at === null ? "" : r.stage_at;
    tr.dataset.stallAt = r.stall_at === null ? "" : r.stall_at;
    tr.dataset.lastAt = r.last_at === null ? "" : r.last_at;
    const stage = cell(tr, "stage").firstElementChild;
    stage.textContent = r.stage;
    stage.className = "stage stage-" + r.stage;
    cell(tr, "device").textContent = r.device ? r.device + (r.device_state ? " (" + r.device_state + ")" : "") : "-";
    const last = cell(tr, "last");
    last.textContent = (r.last_event || "-") + (r.last_at === null ? "" : " ");
    if (r.last_at !== null) {
      const span = document.createElement("span");
      span.className = "muted";
      span.dataset.f = "last-age";
      last.appendChild(span);
    }
    cell(tr, "ip").textContent = r.last_ip || "-";
    refreshRow(tr);
    scheduleStall(tr);
    tr.classList.add("changed");
    setTimeout(() => tr.classList.remove("changed"), 1500);
  }

  let reloading = null;
  function reloadNode() {  // one fetch of this page per burst of events, its live part swapped in
    if (reloading) return;
    reloading = setTimeout(async () => {
      try {
        const r = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
        if (r.ok) {
          const doc = new DOMParser().parseFromString(await r.text(), "text/html");
          const fresh = doc.getElementById("node-live");
          if (fresh) nodeLive.replaceChildren(...fresh.childNodes);
        }
      } finally {
        reloading = null;
      }
    }, 150);
  }

  if (fleet) {
    for (const tr of rows()) scheduleStall(tr);
    const form = document.querySelector("form.filter");
    if (form) {
      form.addEventListener("input", () => {
        counts();
        const [stage, q] = filterValues();
        const params = new URLSearchParams();
        if (stage) params.set("stage", stage);
        if (q) params.set("q", q);
        history.replaceState(null, "", params.toString() ? "/?" + params : "/");
      });
    }
    setInterval(() => { rows().forEach(refreshRow); counts(); }, 10000);  // local clock only
  }

  if (fleet || nodeLive) {
    // since: when the server rendered this page, so events of the moments the page took to load come too
    const params = new URLSearchParams({ since: document.getElementById("main").dataset.rendered });
    if (nodeLive) params.set("node", nodeLive.dataset.node);
    const source = new EventSource("/ui/events?" + params);
    source.addEventListener("open", () => { live.textContent = "live updates: on"; live.dataset.state = "on"; });
    source.addEventListener("error", () => { live.textContent = "live updates: reconnecting"; live.dataset.state = "off"; });
    source.addEventListener("node", (ev) => {
      const r = JSON.parse(ev.data);
      if (fleet) { updateRow(r); counts(); }
      if (nodeLive && r.node === nodeLive.dataset.node) reloadNode();
    });
    source.addEventListener("discovered", (ev) => { if (discovered) showDiscovered(JSON.parse(ev.data)); });
    source.addEventListener("reload", () => location.reload());
  } else if (live) {
    live.hidden = true;
  }
})();
