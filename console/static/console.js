// Live updates for the mcpcancel console: rows rendered by the server
// arrive over server-sent events and are put in place; cancel buttons
// post with fetch, so the page never reloads. Without this script the
// pages still work, only not live.
"use strict";

function rowFrom(html) {
  const t = document.createElement("template");
  t.innerHTML = html.trim();
  return t.content.firstElementChild;
}

function ageCells() {
  const now = Date.now();
  for (const tr of document.querySelectorAll("#calls tr[data-started]")) {
    tr.querySelector(".age").textContent = since(tr.dataset.started, now);
    const p = tr.querySelector("[data-progress-at] .ago");
    if (p) p.textContent = since(p.parentElement.dataset.progressAt, now) + " ago";
  }
}

function since(ms, now) {
  const s = Math.max(0, (now - Number(ms)) / 1000);
  return s < 60 ? s.toFixed(1) + "s" : Math.floor(s / 60) + "m" + Math.floor(s % 60) + "s";
}

function showEmpty() {
  const empty = document.getElementById("no-calls");
  if (empty) empty.hidden = document.querySelectorAll("#calls tbody tr").length > 0;
}

function live() {
  const calls = document.querySelector("#calls tbody");
  const decisions = document.querySelector("#decisions tbody");
  if (!calls || !decisions) return;
  const badge = document.getElementById("live");
  let since = document.getElementById("decisions").dataset.since;
  let seen = new Set(); // calls the current stream has sent
  const connect = () => {
    const es = new EventSource("/events?since=" + encodeURIComponent(since));
    es.onopen = () => { badge.textContent = "live"; badge.className = "live on"; seen = new Set(); };
    es.onerror = () => { badge.textContent = "reconnecting…"; badge.className = "live"; };
    es.addEventListener("call-running", (e) => {
      const m = JSON.parse(e.data);
      seen.add(m.id);
      const row = rowFrom(m.html), old = document.getElementById("call-" + m.id);
      if (old) old.replaceWith(row); else calls.appendChild(row);
      showEmpty();
    });
    es.addEventListener("call-progress", (e) => {
      // Only a row still shown: a settled call stays gone.
      const m = JSON.parse(e.data), old = document.getElementById("call-" + m.id);
      if (old) old.replaceWith(rowFrom(m.html));
    });
    es.addEventListener("calls-synced", () => {
      for (const tr of calls.querySelectorAll("tr[data-call]")) {
        if (!seen.has(tr.dataset.call)) tr.remove();
      }
      showEmpty();
    });
    es.addEventListener("call-settled", (e) => {
      const old = document.getElementById("call-" + JSON.parse(e.data).id);
      if (old) old.remove();
      showEmpty();
    });
    es.addEventListener("stats", (e) => {
      if (window.mcpcancelCharts) window.mcpcancelCharts.draw(JSON.parse(e.data));
    });
    es.addEventListener("decision", (e) => {
      const m = JSON.parse(e.data);
      if (document.getElementById("decision-" + m.id)) return;
      decisions.prepend(rowFrom(m.html));
    });
  };
  connect();
  setInterval(ageCells, 500);
}

document.addEventListener("submit", async (e) => {
  const form = e.target;
  if (!form.classList.contains("cancel")) return;
  e.preventDefault();
  const button = form.querySelector("button");
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    const resp = await fetch(form.action, { method: "POST", body: new URLSearchParams(new FormData(form)), headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error(await resp.text());
    const r = await resp.json();
    button.textContent = r.result === "cancelled" ? "Cancelled" : "Already " + r.result.replace("already_", "");
  } catch (err) {
    button.disabled = false;
    button.textContent = "Cancel";
    alert("The cancel failed: " + err.message);
  }
});

document.addEventListener("DOMContentLoaded", live);
