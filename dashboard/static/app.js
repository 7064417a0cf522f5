/* PocketMQ dashboard: one page, hash routes, every figure from the JSON API under /api/.
 *
 * Every API failure lands in the red banner (#errors) with the broker's message;
 * a page never stays blank. Write buttons are drawn only when the session may write.
 * Text from the cluster is always set as textContent, never parsed as HTML.
 */
"use strict";

const REFRESH_MS = 5000;
let session = {acl: false, logged_in: false, user: "", can_write: false};
let timer = null;

// -- helpers ---------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows, opts) {
  opts = opts || {};
  return h("table", {class: "grid", id: opts.id},
    h("thead", {}, h("tr", {}, headers.map(x => h("th", {}, x)))),
    h("tbody", {}, rows.length ? rows.map(r => h("tr", {}, r.map(c => h("td", {}, c))))
      : h("tr", {}, h("td", {colspan: headers.length, class: "muted"}, opts.empty || "none"))));
}

function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : "-"; }
function fmtBytes(n) {
  if (n === null || n === undefined || n === "") return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; n = Number(n);
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${Math.round(n * 10) / 10} ${units[i]}`;
}
function fmtPct(r) { return r === "" || r === undefined ? "-" : `${(Number(r) * 100).toFixed(1)} %`; }
function enc(s) { return encodeURIComponent(s); }
function link(href, text) { return h("a", {href}, text); }
function writeOnly(el) { return session.can_write ? el : null; }

function showError(message) {
  const box = document.getElementById("errors");
  box.appendChild(h("div", {class: "error"}, h("button", {class: "close", title: "dismiss",
    onclick: e => e.target.parentNode.remove()}, "×"), message));
}
function clearErrors() { document.getElementById("errors").textContent = ""; }
function notice(el, message, ok) {
  el.textContent = "";
  el.appendChild(h("div", {class: ok ? "ok" : "error"}, message));
}

async function api(method, path, body) {
  const init = {method, headers: {}, credentials: "same-origin"};
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try { resp = await fetch(path, init); }
  catch (e) { throw new Error(`the dashboard did not answer: ${e.message}`); }
  let data = null;
  try { data = await resp.json(); } catch (e) { data = {error: `HTTP ${resp.status}`}; }
  if (resp.status === 401 && path !== "/api/login") { session.logged_in = false; renderLogin(); }
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

// Runs fn, reporting its failure in the banner (never a blank page).
async function guarded(fn) {
  try { return await fn(); } catch (e) { showError(e.message); return null; }
}

function page(title, ...children) {
  const main = document.getElementById("main");
  main.textContent = "";
  main.appendChild(h("h1", {}, title));
  for (const c of children) if (c) main.appendChild(c);
  return main;
}

function seriesOf(history, suffix, label) {
  const out = {};
  for (const [key, points] of Object.entries(history || {})) {
    if (key.endsWith("/" + suffix)) out[label(key)] = points;
  }
  return out;
}

function refreshEvery(fn) {
  clearInterval(timer);
  timer = setInterval(() => { if (!document.hidden) fn(); }, REFRESH_MS);
}

// -- login -------------------------------------------------------------------------------
function renderLogin() {
  clearInterval(timer);
  document.getElementById("who").textContent = "";
  const out = h("div", {id: "login-result"});
  const form = h("form", {id: "login-form", class: "card", onsubmit: async e => {
    e.preventDefault();
    try {
      const r = await api("POST", "/api/login", {access_key: form.access_key.value,
                                                 secret_key: form.secret_key.value});
      Object.assign(session, r);
      showWho(); route();
    } catch (err) { notice(out, err.message, false); }
  }},
    h("p", {}, "The cluster's ACL is on: log in with an access key. Every action is signed as that user."),
    h("label", {}, "Access key ", h("input", {name: "access_key", autocomplete: "username", required: true})),
    h("label", {}, "Secret key ", h("input", {name: "secret_key", type: "password",
                                              autocomplete: "current-password", required: true})),
    h("button", {type: "submit", id: "login-button"}, "Log in"), out);
  page("Log in", form);
}

function showWho() {
  const who = document.getElementById("who");
  who.textContent = "";
  if (session.acl && session.logged_in) {
    who.appendChild(h("span", {}, `${session.user}${session.can_write ? "" : " (read-only)"} `));
    who.appendChild(h("button", {class: "link", onclick: async () => {
      await guarded(() => api("POST", "/api/logout", {}));
      session.logged_in = false; renderLogin();
    }}, "log out"));
  } else if (!session.can_write) {
    who.textContent = "read-only";
  }
}

// -- cluster -------------------------------------------------------------------------------
async function clusterPage() {
  const body = h("div", {id: "cluster"});
  page("Cluster", body);
  const draw = async () => {
    const d = await guarded(() => api("GET", "/api/cluster"));
    if (!d) return;
    body.textContent = "";
    body.appendChild(h("h2", {}, "Brokers"));
    body.appendChild(table(
      ["Cluster", "Broker", "ID", "Role", "Address", "Version", "Put TPS", "Get TPS",
       "Disk used", "Stored", "Replication lag", "Metrics", "Error"],
      d.brokers.map(b => [b.cluster, b.broker_name, b.broker_id, b.role, b.addr, b.version,
        b.put_tps, b.get_tps, fmtPct(b.disk_used_ratio), fmtBytes(b.store_bytes),
        b.replication_lag_bytes === null ? "-" : fmtBytes(b.replication_lag_bytes),
        b.metrics_url ? h("a", {href: b.metrics_url, target: "_blank", rel: "noopener"}, "/metrics") : "-",
        b.error ? h("span", {class: "bad"}, b.error) : ""]), {id: "brokers", empty: "no live broker"}));
    body.appendChild(h("h2", {}, "Nameservers"));
    body.appendChild(table(["Address", "Status", "Brokers known"],
      d.nameservers.map(n => [n.addr, n.ok ? h("span", {class: "good"}, "up") :
        h("span", {class: "bad"}, n.error), n.brokers]), {id: "nameservers"}));
    body.appendChild(h("h2", {}, "Throughput, last hour"));
    const label = key => key.split("/").slice(1, 3).join("/");
    body.appendChild(h("div", {class: "charts", id: "tps-charts"},
      lineChart(seriesOf(d.history, "put_tps", label), {title: "put TPS per broker", unit: "msg/s"}),
      lineChart(seriesOf(d.history, "get_tps", label), {title: "get TPS per broker", unit: "msg/s"})));
    body.appendChild(h("p", {class: "muted"}, `Sampled every ${d.interval_s} s by the dashboard; the last hour is kept in memory.`));
    if (d.prometheus) body.appendChild(h("p", {}, h("a", {href: d.prometheus, target: "_blank", rel: "noopener"}, "Longer history in Prometheus")));
    const errs = Object.entries(d.history_errors || {});
    if (errs.length) body.appendChild(h("p", {class: "bad"}, "Sampling: " + errs.map(([k, v]) => `${k}: ${v}`).join("; ")));
  };
  await draw();
  refreshEvery(draw);
}

// -- topics ----------------------------------------------------------------------------------
async function topicsPage(params) {
  const kind = params.get("kind") || "user";
  const filter = h("div", {class: "filters", id: "topic-filters"},
    ["user", "retry", "dlq", "system", "all"].map(k =>
      h("a", {href: `#/topics?kind=${k}`, class: k === kind ? "active" : "", "data-kind": k}, k)));
  const out = h("div", {id: "create-topic-result"});
  const form = writeOnly(h("form", {id: "create-topic", class: "card inline", onsubmit: async e => {
    e.preventDefault();
    try {
      const r = await api("POST", "/api/topics", {topic: form.topic.value,
        read_queue_nums: Number(form.read.value), write_queue_nums: Number(form.write.value),
        perm: form.perm.value});
      notice(out, `created ${r.topic} on ${r.brokers.join(", ")}` +
                  (r.routed ? "" : " (the nameserver lists it after the next registration)"), true);
      await draw();
    } catch (err) { notice(out, err.message, false); }
  }}, h("strong", {}, "New topic "),
    h("input", {name: "topic", placeholder: "topic", required: true}),
    h("label", {}, "read queues ", h("input", {name: "read", type: "number", min: 1, value: 8})),
    h("label", {}, "write queues ", h("input", {name: "write", type: "number", min: 1, value: 8})),
    h("select", {name: "perm"}, ["RW", "R", "W"].map(p => h("option", {}, p))),
    h("button", {type: "submit"}, "Create"), out));
  const list = h("div", {id: "topic-list"});
  page("Topics", filter, form, list);
  const draw = async () => {
    const d = await guarded(() => api("GET", `/api/topics?kind=${enc(kind)}`));
    if (!d) return;
    list.textContent = "";
    list.appendChild(table(["Topic", "Kind", "Brokers", "Read queues", "Write queues", "Perm", ""],
      d.topics.map(t => [link(`#/topic/${enc(t.topic)}`, t.topic), t.kind, t.brokers.join(", "),
        t.read_queue_nums, t.write_queue_nums, t.perm,
        writeOnly(h("span", {}, h("button", {class: "small", "data-action": "update",
          onclick: () => updateTopic(t, draw)}, "Update"), " ",
          h("button", {class: "small danger", "data-action": "delete",
            onclick: () => deleteTopic(t.topic, draw)}, "Delete")))]),
      {id: "topics", empty: "no topic of this kind"}));
  };
  await draw();
  refreshEvery(draw);
}

function dialog(title, ...children) {
  const box = h("dialog", {class: "card"}, h("h3", {}, title), ...children);
  document.body.appendChild(box);
  box.addEventListener("close", () => box.remove());
  box.showModal();
  return box;
}

function updateTopic(t, done) {
  const out = h("div");
  const form = h("form", {id: "update-topic", onsubmit: async e => {
    e.preventDefault();
    try {
      await api("POST", `/api/topics/${enc(t.topic)}/update`, {read_queue_nums: Number(form.read.value),
        write_queue_nums: Number(form.write.value), perm: form.perm.value});
      box.close(); await done();
    } catch (err) { notice(out, err.message, false); }
  }},
    h("label", {}, "read queues per broker ", h("input", {name: "read", type: "number", min: 1,
      value: Math.max(1, Math.round(t.read_queue_nums / Math.max(1, t.brokers.length)))})),
    h("label", {}, "write queues per broker ", h("input", {name: "write", type: "number", min: 1,
      value: Math.max(1, Math.round(t.write_queue_nums / Math.max(1, t.brokers.length)))})),
    h("select", {name: "perm"}, ["RW", "R", "W"].map(p => h("option", {selected: p === t.perm}, p))),
    h("button", {type: "submit"}, "Save"), " ",
    h("button", {type: "button", onclick: () => box.close()}, "Cancel"), out);
  const box = dialog(`Update ${t.topic}`, form);
}

function deleteTopic(topic, done) {
  const out = h("div");
  const form = h("form", {id: "delete-topic", onsubmit: async e => {
    e.preventDefault();
    try {
      await api("POST", `/api/topics/${enc(topic)}/delete`, {confirm: form.confirm.value});
      box.close(); await done();
    } catch (err) { notice(out, err.message, false); }
  }},
    h("p", {}, `Deleting ${topic} removes it and its messages from every broker. Type its name to confirm.`),
    h("input", {name: "confirm", id: "confirm-delete", placeholder: topic, autocomplete: "off"}),
    h("button", {type: "submit", class: "danger"}, "Delete"), " ",
    h("button", {type: "button", onclick: () => box.close()}, "Cancel"), out);
  const box = dialog(`Delete ${topic}?`, form);
}

function deleteGroup(group) {
  const out = h("div");
  const form = h("form", {id: "delete-group-form", onsubmit: async e => {
    e.preventDefault();
    try {
      await api("POST", `/api/groups/${enc(group)}/delete`, {confirm: form.confirm.value});
      box.close(); location.hash = "#/groups";
    } catch (err) { notice(out, err.message, false); }
  }},
    h("p", {}, `Deleting ${group} forgets its offsets and its retry topic on every broker; brokers refuse while its consumers are online. Type its name to confirm.`),
    h("input", {name: "confirm", id: "confirm-delete-group", placeholder: group, autocomplete: "off"}),
    h("button", {type: "submit", class: "danger"}, "Delete"), " ",
    h("button", {type: "button", onclick: () => box.close()}, "Cancel"), out);
  const box = dialog(`Delete ${group}?`, form);
}

async function topicPage(topic) {
  const body = h("div", {id: "topic"});
  const out = h("div", {id: "send-result"});
  const form = writeOnly(h("form", {id: "send-form", class: "card", onsubmit: async e => {
    e.preventDefault();
    try {
      const r = await api("POST", `/api/topics/${enc(topic)}/send`, {body: form.body.value,
        tags: form.tags.value, keys: form.keys.value});
      out.textContent = "";
      out.appendChild(h("div", {class: "ok"}, `${r.status}: `,
        link(`#/message/${enc(r.offset_msg_id)}`, r.msg_id), ` on ${r.broker_name} queue ${r.queue_id} offset ${r.queue_offset}`));
    } catch (err) { notice(out, err.message, false); }
  }}, h("h2", {}, "Send a message"),
    h("textarea", {name: "body", rows: 3, placeholder: "body (text)"}),
    h("div", {class: "inline"},
      h("input", {name: "tags", placeholder: "tag"}),
      h("input", {name: "keys", placeholder: "keys (space separated)"}),
      h("button", {type: "submit"}, "Send")), out));
  page(`Topic ${topic}`, body, form);
  const draw = async () => {
    const d = await guarded(() => api("GET", `/api/topics/${enc(topic)}`));
    if (!d) return;
    body.textContent = "";
    const tps = {...seriesOf(d.history, "put_tps", () => "put"),
                 ...seriesOf(d.history, "get_tps", () => "get")};
    body.appendChild(lineChart(tps, {title: "put TPS (the queues' max offsets) and get TPS " +
                                            "(the brokers' /metrics, when they serve it)", unit: "msg/s"}));
    if (d.prometheus) body.appendChild(h("p", {}, h("a", {href: d.prometheus, target: "_blank", rel: "noopener"}, "Longer history in Prometheus")));
    body.appendChild(h("h2", {}, "Route"));
    body.appendChild(table(["Broker", "Read queues", "Write queues", "Perm", "Members"],
      d.route.map(r => [r.broker_name, r.read_queue_nums, r.write_queue_nums, r.perm,
        Object.entries(r.addrs).map(([id, a]) => `${id}: ${a}`).join(", ")]), {id: "route"}));
    body.appendChild(h("h2", {}, "Queues"));
    body.appendChild(table(["Broker", "Queue", "Min offset", "Max offset", "Last stored"],
      d.queues.map(q => [q.broker_name, q.queue_id, q.min_offset, q.max_offset,
        fmtTime(q.last_store_timestamp_ms)]), {id: "queues"}));
    body.appendChild(h("h2", {}, "Consumer groups"));
    body.appendChild(table(["Group", "Online clients", "Subscribed"],
      d.groups.map(g => [link(`#/group/${enc(g.group)}`, g.group), g.online, g.subscribed ? "yes" : "offsets only"]),
      {id: "topic-groups"}));
  };
  await draw();
  refreshEvery(draw);
}

// -- consumer groups -------------------------------------------------------------------------
async function groupsPage() {
  const list = h("div", {id: "group-list"});
  page("Consumer groups", list);
  const draw = async () => {
    const d = await guarded(() => api("GET", "/api/groups"));
    if (!d) return;
    list.textContent = "";
    list.appendChild(table(["Group", "Online clients", "Model", "Type", "Consume TPS", "Lag", "Topics"],
      d.groups.map(g => [link(`#/group/${enc(g.group)}`, g.group), g.online, g.message_model || "-",
        g.consume_type || "-", g.consume_tps === null ? "-" : g.consume_tps,
        g.lag === null ? "-" : g.lag, [...new Set([...g.subscribed_topics, ...g.offset_topics])].join(", ")]),
      {id: "groups", empty: "no consumer group"}));
  };
  await draw();
  refreshEvery(draw);
}

async function groupPage(group) {
  const body = h("div", {id: "group"});
  const reset = writeOnly(h("div", {id: "reset-box", class: "card"}));
  const remove = writeOnly(h("p", {}, h("button", {class: "small danger", id: "delete-group",
    onclick: () => deleteGroup(group)}, "Delete group")));
  page(`Consumer group ${group}`, body, reset, remove);
  let topics = [];
  const draw = async () => {
    const d = await guarded(() => api("GET", `/api/groups/${enc(group)}`));
    if (!d) return;
    body.textContent = "";
    const g = d.group;
    topics = [...new Set([...(g.subscribed_topics || []), ...(g.offset_topics || []),
                          ...d.queues.map(q => q.topic)])].filter(t => !t.startsWith("%RETRY%"));
    body.appendChild(h("p", {}, `Total lag ${d.total_lag}; model ${g.message_model || "-"}; `,
      `type ${g.consume_type || "-"}; online clients ${(g.client_ids || []).length}`));
    body.appendChild(h("div", {class: "charts"},
      lineChart(seriesOf(d.history, "lag", () => "lag"), {title: "lag (messages)"}),
      lineChart(seriesOf(d.history, "consume_tps", () => "consumed"),
                {title: "consume TPS", unit: "msg/s"})));
    body.appendChild(h("h2", {}, "Lag per queue"));
    body.appendChild(table(["Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag", "Last consumed"],
      d.queues.map(q => [q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset,
        q.lag, fmtTime(q.last_timestamp_ms)]), {id: "progress"}));
    body.appendChild(h("h2", {}, "Connections and subscriptions"));
    body.appendChild(table(["Client id"], (g.client_ids || []).map(c => [c]), {id: "clients", empty: "no client online"}));
    body.appendChild(table(["Subscribed topic"], (g.subscribed_topics || []).map(t => [link(`#/topic/${enc(t)}`, t)]),
      {id: "subscriptions", empty: "no subscription (offline)"}));
    if (reset && !reset.firstChild) drawReset();
  };
  const drawReset = () => {
    const out = h("div", {id: "reset-result"});
    const form = h("form", {id: "reset-form", onsubmit: e => e.preventDefault()},
      h("h2", {}, "Reset offsets"),
      h("select", {name: "topic"}, topics.map(t => h("option", {}, t))),
      h("select", {name: "kind"}, ["earliest", "latest", "time"].map(k => h("option", {}, k))),
      h("input", {name: "time", type: "datetime-local", step: 1}),
      h("button", {type: "button", id: "reset-preview", onclick: async () => {
        try {
          const r = await api("POST", `/api/groups/${enc(group)}/reset/preview`, target());
          out.textContent = "";
          out.appendChild(h("p", {}, `Plan for ${r.topic}: ${r.to_consume} message(s) to consume after the reset.`));
          out.appendChild(table(["Broker", "Queue", "Now", "After", "Moves by", "To consume"],
            r.queues.map(q => [q.broker_name, q.queue_id, q.current_offset, q.new_offset, q.moves_by, q.to_consume]),
            {id: "reset-plan"}));
          form.querySelector("#reset-apply").disabled = false;
        } catch (err) { notice(out, err.message, false); }
      }}, "Preview"), " ",
      h("button", {type: "button", id: "reset-apply", class: "danger", disabled: true, onclick: async () => {
        try {
          const r = await api("POST", `/api/groups/${enc(group)}/reset`, target());
          notice(out, `reset ${r.queues.length} queue(s) of ${r.topic}; told ${r.notified_client_ids.length} online client(s)`, true);
          await draw();
        } catch (err) { notice(out, err.message, false); }
      }}, "Reset"), out);
    const target = () => ({topic: form.topic.value,
      to: form.kind.value === "time" ? String(new Date(form.time.value).getTime()) : form.kind.value});
    reset.appendChild(form);
  };
  await draw();
  refreshEvery(draw);
}

// -- messages --------------------------------------------------------------------------------
function messageTable(messages, opts) {
  opts = opts || {};
  return table([opts.select ? "" : null, "Message id", "Topic", "Tags", "Keys", "Broker", "Queue", "Offset", "Stored", "Body"].filter(x => x !== null),
    messages.map(m => [opts.select ? h("input", {type: "checkbox", value: m.offset_msg_id, class: "pick"}) : null,
      link(`#/message/${enc(m.offset_msg_id)}`, m.msg_id || m.offset_msg_id), m.topic, m.tags,
      m.keys.join(" "), m.broker_name, m.queue_id, m.queue_offset, fmtTime(m.store_timestamp_ms),
      h("code", {}, m.preview)].filter(x => x !== null)), {id: opts.id || "messages", empty: "no message found"});
}

function messagesPage(params) {
  const results = h("div", {id: "message-results"});
  const search = async query => {
    const d = await guarded(() => api("GET", `/api/messages?${query}`));
    results.textContent = "";
    if (d) results.appendChild(messageTable(d.messages));
  };
  const byKey = h("form", {id: "by-key", class: "card inline", onsubmit: e => {
    e.preventDefault(); search(`topic=${enc(byKey.topic.value)}&key=${enc(byKey.key.value)}`);
  }}, h("strong", {}, "By key "), h("input", {name: "topic", placeholder: "topic", required: true, value: params.get("topic") || ""}),
    h("input", {name: "key", placeholder: "key", required: true}), h("button", {type: "submit"}, "Search"));
  const byId = h("form", {id: "by-id", class: "card inline", onsubmit: e => {
    e.preventDefault(); search(`id=${enc(byId.id.value)}&topic=${enc(byId.topic.value)}`);
  }}, h("strong", {}, "By message id "), h("input", {name: "id", placeholder: "message id", required: true}),
    h("input", {name: "topic", placeholder: "topic (for a unique id)"}), h("button", {type: "submit"}, "Search"));
  const now = new Date(), hourAgo = new Date(now - 3600e3);
  const local = d => new Date(d - d.getTimezoneOffset() * 60e3).toISOString().slice(0, 19);
  const byTime = h("form", {id: "by-time", class: "card inline", onsubmit: e => {
    e.preventDefault();
    search(`topic=${enc(byTime.topic.value)}&begin=${new Date(byTime.begin.value).getTime()}` +
           `&end=${new Date(byTime.end.value).getTime()}&max=${enc(byTime.max.value)}`);
  }}, h("strong", {}, "By time "), h("input", {name: "topic", placeholder: "topic", required: true}),
    h("input", {name: "begin", type: "datetime-local", step: 1, value: local(hourAgo)}),
    h("input", {name: "end", type: "datetime-local", step: 1, value: local(now)}),
    h("input", {name: "max", type: "number", min: 1, max: 1000, value: 64}),
    h("button", {type: "submit"}, "Search"));
  page("Messages", byKey, byId, byTime, results);
}

async function messagePage(id) {
  const body = h("div", {id: "message"});
  page("Message", body);
  const d = await guarded(() => api("GET", `/api/message?id=${enc(id)}`));
  if (!d) return;
  const views = {text: d.body.text === null ? "(not UTF-8 text: see hex)" : d.body.text,
                 hex: d.body.hex + (d.body.hex_truncated ? "\n… (first 64 KiB)" : ""),
                 json: d.body.json === null ? "(not JSON)" : d.body.json};
  const pre = h("pre", {id: "body-view"}, views.text);
  const tabs = h("div", {class: "filters", id: "body-tabs"}, Object.keys(views).map(k =>
    h("button", {type: "button", "data-view": k, class: k === "text" ? "active" : "", onclick: e => {
      pre.textContent = views[k];
      tabs.querySelectorAll("button").forEach(b => b.classList.toggle("active", b === e.target));
    }}, k)));
  body.appendChild(table(["Message id", "Offset message id", "Topic", "Tags", "Keys", "Born", "Stored", "Reconsumed"],
    [[d.msg_id, d.offset_msg_id, link(`#/topic/${enc(d.topic)}`, d.topic), d.tags, d.keys.join(" "),
      fmtTime(d.born_timestamp_ms), fmtTime(d.store_timestamp_ms), d.reconsume_times]], {id: "message-head"}));
  body.appendChild(h("h2", {}, "Where it is stored"));
  body.appendChild(table(["Broker", "Address", "Queue", "Queue offset", "Commit-log offset", "Size"],
    [[d.broker_name, d.store_addr, d.queue_id, d.queue_offset, d.phys_offset, fmtBytes(d.body.size_bytes)]], {id: "stored"}));
  body.appendChild(h("h2", {}, "Body"));
  body.appendChild(tabs);
  body.appendChild(pre);
  body.appendChild(h("h2", {}, "Properties"));
  body.appendChild(table(["Name", "Value"], Object.entries(d.properties), {id: "properties"}));
  body.appendChild(h("h2", {}, "Consumed by"));
  body.appendChild(table(["Group", "Consumed", "Group offset on its queue"],
    d.consumed_by.map(c => [link(`#/group/${enc(c.group)}`, c.group),
      c.error ? h("span", {class: "bad"}, c.error) : (c.consumed ? "yes" : "not yet"), c.consumer_offset]),
    {id: "consumed-by", empty: "no group reads this topic"}));
  const out = h("div", {id: "resend-result"});
  const form = writeOnly(h("form", {id: "resend-form", class: "card inline", onsubmit: async e => {
    e.preventDefault();
    try {
      const r = await api("POST", "/api/message/resend", {id: d.offset_msg_id, group: form.group.value});
      notice(out, `resent to ${r.group}: ${r.status}`, true);
    } catch (err) { notice(out, err.message, false); }
  }}, h("strong", {}, "Resend to group "),
    h("input", {name: "group", list: "group-options", required: true}),
    h("datalist", {id: "group-options"}, d.consumed_by.map(c => h("option", {value: c.group}))),
    h("button", {type: "submit"}, "Resend"), out));
  if (form) body.appendChild(form);
  body.appendChild(h("p", {}, link(`#/traces?id=${enc(d.msg_id)}`, "Trace of this message")));
}

async function dlqPage(params) {
  const group = params.get("group") || "";
  const list = h("div", {id: "dlq-list"});
  const form = h("form", {id: "dlq-form", class: "card inline", onsubmit: e => {
    e.preventDefault(); location.hash = `#/dlq?group=${enc(form.group.value)}`;
  }}, h("strong", {}, "Dead letters of group "), h("input", {name: "group", required: true, value: group}),
    h("button", {type: "submit"}, "Show"));
  page("Dead letters", form, list);
  if (!group) return;
  const d = await guarded(() => api("GET", `/api/dlq?group=${enc(group)}`));
  if (!d) return;
  const out = h("div", {id: "dlq-result"});
  list.appendChild(h("p", {}, `${d.messages.length} message(s) in ${d.topic}. `,
    h("a", {href: `/api/dlq/export?group=${enc(group)}`, id: "dlq-export", download: true}, "Export as JSON")));
  list.appendChild(messageTable(d.messages, {select: session.can_write, id: "dlq-messages"}));
  list.appendChild(writeOnly(h("button", {id: "dlq-resend", onclick: async () => {
    const ids = [...list.querySelectorAll("input.pick:checked")].map(c => c.value);
    if (!ids.length) { notice(out, "select messages to resend", false); return; }
    try {
      const r = await api("POST", "/api/dlq/resend", {group, ids});
      const failed = r.results.filter(x => x.error);
      notice(out, `resent ${r.results.length - failed.length} of ${ids.length} to ${group}` +
        (failed.length ? `; failed: ${failed.map(x => x.error).join("; ")}` : ""), !failed.length);
    } catch (err) { notice(out, err.message, false); }
  }}, "Resend selected to the group")));
  list.appendChild(out);
}

// -- traces ------------------------------------------------------------------------------------
const TRACE_FIELDS = {
  Pub: ["type", "time", "region", "group", "topic", "msgId", "tags", "keys", "storeHost",
        "bodyLength", "costTime", "msgType", "offsetMsgId", "success"],
  SubBefore: ["type", "time", "region", "group", "requestId", "msgId", "retryTimes", "keys"],
  SubAfter: ["type", "requestId", "msgId", "costTime", "success", "keys"],
};

function traceRows(record) {
  const p = record.parsed;
  if (Array.isArray(p)) {
    return p.map(fields => {
      const names = TRACE_FIELDS[fields[0]] || fields.map((_, i) => `field ${i}`);
      return fields.map((v, i) => `${names[i] || "field " + i}=${v}`).join("  ");
    });
  }
  if (p && typeof p === "object") return [Object.entries(p).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  ")];
  return [record.text === null ? "(binary)" : record.text];
}

async function tracesPage(params) {
  const id = params.get("id") || "";
  const list = h("div", {id: "trace-list"});
  const form = h("form", {id: "trace-form", class: "card inline", onsubmit: e => {
    e.preventDefault(); location.hash = `#/traces?id=${enc(form.id.value)}`;
  }}, h("strong", {}, "Trace of message id "), h("input", {name: "id", required: true, value: id}),
    h("button", {type: "submit"}, "Show"));
  page("Message trace", form, list);
  if (!id) return;
  const d = await guarded(() => api("GET", `/api/traces?id=${enc(id)}`));
  if (!d) return;
  if (!d.enabled) { list.appendChild(h("p", {class: "muted"}, d.note)); return; }
  list.appendChild(table(["Stored", "Broker", "Trace"],
    d.records.map(r => [fmtTime(r.store_timestamp_ms), r.broker_name,
      h("div", {}, traceRows(r).map(line => h("code", {class: "trace"}, line)))]),
    {id: "traces", empty: "no trace record of this message id (is message trace on in its clients?)"}));
}

// -- routing -------------------------------------------------------------------------------------
async function route() {
  clearInterval(timer);
  clearErrors();
  const [path, query] = (location.hash.slice(1) || "/cluster").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll("#nav a").forEach(a => a.classList.toggle("active",
    a.dataset.page === parts[0] || a.dataset.page === parts[0] + "s"));
  if (session.acl && !session.logged_in) { renderLogin(); return; }
  try {
    switch (parts[0]) {
      case "topics": await topicsPage(params); break;
      case "topic": await topicPage(parts.slice(1).join("/")); break;
      case "groups": await groupsPage(); break;
      case "group": await groupPage(parts.slice(1).join("/")); break;
      case "messages": messagesPage(params); break;
      case "message": await messagePage(parts.slice(1).join("/")); break;
      case "dlq": await dlqPage(params); break;
      case "traces": await tracesPage(params); break;
      default: await clusterPage();
    }
  } catch (e) {
    showError(`the page failed: ${e.message}`);
  }
}

async function boot() {
  window.addEventListener("hashchange", route);
  const s = await guarded(() => api("GET", "/api/session"));
  if (!s) { page("PocketMQ", h("p", {class: "bad"}, "The dashboard cannot reach the cluster; see the error above.")); return; }
  session = s;
  showWho();
  await route();
}

document.addEventListener("DOMContentLoaded", boot);
