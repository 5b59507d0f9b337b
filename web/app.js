// The chat page: conversations in the sidebar, messages with streamed
// answers and their status lines, the composer, the settings and the live
// panel of the server's figures. Uses TernStore (conversations.js), TernApi
// (api.js) and TernMarkdown (markdown.js).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const state = {
    model: null,           // /v1/models' entry: id, max_model_len, generation_config, notice
    conversation: null,    // the open conversation (TernStore)
    streaming: null,       // {controller, conversation, message} while an answer streams in
    keyWaiters: [],        // resolvers waiting for the API key dialog
  };

  // ---- small helpers ----

  function element(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function button(label, onClick, className = "") {
    const b = element("button", className, label);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  }

  function formatMs(ms) {
    return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : Math.round(ms) + " ms";
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch (e) { /* not a secure context: fall back below */ }
    const area = element("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }

  function nearBottom() {
    const box = $("messages");
    return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  function scrollToBottom() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  // ---- the banner: connection problems that are not tied to one answer ----

  function showBanner(text, retry) {
    const banner = $("banner");
    banner.replaceChildren(element("span", "", text));
    if (retry) banner.appendChild(button("Retry", retry));
    banner.hidden = false;
  }

  function hideBanner() {
    $("banner").hidden = true;
  }

  // ---- API key ----

  // Asks for the key once, however many callers wait; resolves when it is entered.
  function askForKey(message) {
    $("key-message").textContent = message || "This server needs an API key.";
    const dialog = $("key-dialog");
    if (!dialog.open) dialog.showModal();
    $("api-key").focus();
    return new Promise((resolve) => state.keyWaiters.push(resolve));
  }

  function onKeyEntered(event) {
    event.preventDefault();
    TernApi.setApiKey($("api-key").value.trim());
    $("key-dialog").close();
    const waiters = state.keyWaiters;
    state.keyWaiters = [];
    waiters.forEach((resolve) => resolve());
  }

  // ---- the model ----

  async function loadModel() {
    try {
      state.model = await TernApi.model();
    } catch (e) {
      if (e.kind === "auth") {
        await askForKey(TernApi.apiKey() ? "That API key was refused. Enter the server's key." : undefined);
        return loadModel();
      }
      showBanner("Cannot reach the tern server (" + e.message + ").", () => { hideBanner(); loadModel(); });
      return;
    }
    hideBanner();
    $("model-name").textContent = state.model.id;
    $("context-length").textContent = state.model.max_model_len.toLocaleString("en") + " tokens";
    // The model's own line for its users (config.json's tern_notice), e.g. what the demo model is.
    $("model-notice").textContent = state.model.notice || "";
    $("model-notice").hidden = !state.model.notice;
    const defaults = state.model.generation_config || {};
    if (defaults.temperature !== undefined) $("temperature").placeholder = String(defaults.temperature);
    if (defaults.top_p !== undefined) $("top-p").placeholder = String(defaults.top_p);
    $("max-tokens").placeholder = "up to the context";
  }

  // ---- settings ----

  function loadSettings() {
    const s = TernStore.settings();
    $("temperature").value = s.temperature;
    $("top-p").value = s.top_p;
    $("max-tokens").value = s.max_tokens;
  }

  function saveSettings() {
    TernStore.saveSettings({ temperature: $("temperature").value, top_p: $("top-p").value,
                             max_tokens: $("max-tokens").value });
  }

  // Sampling fields for the request: only those the user set; the server's defaults
  // (the model's generation_config) apply to the rest.
  function samplingFields() {
    const fields = {};
    const temperature = parseFloat($("temperature").value);
    const topP = parseFloat($("top-p").value);
    const maxTokens = parseInt($("max-tokens").value, 10);
    if (!Number.isNaN(temperature)) fields.temperature = temperature;
    if (!Number.isNaN(topP)) fields.top_p = topP;
    if (!Number.isNaN(maxTokens) && maxTokens > 0) fields.max_tokens = maxTokens;
    return fields;
  }

  // ---- the conversation list ----

  function renderConversationList() {
    const list = $("conversation-list");
    list.replaceChildren();
    for (const c of TernStore.all()) {
      const item = element("li", c.id === state.conversation.id ? "conversation current" : "conversation");
      const open = button(c.title, () => openConversation(c.id), "conversation-title");
      open.title = c.title;
      const remove = button("✕", () => deleteConversation(c.id), "conversation-delete");
      remove.title = "Delete this conversation";
      remove.setAttribute("aria-label", "Delete " + c.title);
      item.append(open, remove);
      list.appendChild(item);
    }
  }

  function openConversation(id) {
    state.conversation = TernStore.get(id) || TernStore.current();
    TernStore.setCurrent(state.conversation.id);
    $("system-prompt").value = state.conversation.system || "";
    document.body.classList.remove("sidebar-open");
    renderConversationList();
    renderMessages();
  }

  function newConversation() {
    if (state.conversation.messages.length === 0) return openConversation(state.conversation.id);
    openConversation(TernStore.create().id);
    $("prompt").focus();
  }

  function deleteConversation(id) {
    if (state.streaming && state.streaming.conversation.id === id) state.streaming.controller.abort();
    TernStore.remove(id);
    const next = TernStore.all()[0] || TernStore.create();
    openConversation(next.id);
  }

  // ---- messages ----

  function renderMessages() {
    const box = $("messages");
    box.replaceChildren();
    const messages = state.conversation.messages;
    if (messages.length === 0) {
      box.appendChild(element("p", "empty", "Ask anything. Enter sends, Shift+Enter starts a new line."));
    }
    messages.forEach((m, i) => box.appendChild(messageElement(m, i)));
    scrollToBottom();
    updateComposer();
  }

  function rerenderMessage(index) {
    const old = $("messages").querySelector(`[data-index="${index}"]`);
    const fresh = messageElement(state.conversation.messages[index], index);
    if (old) old.replaceWith(fresh);
    else $("messages").appendChild(fresh);
  }

  function messageElement(message, index) {
    const box = element("div", "message " + message.role);
    box.dataset.index = index;
    const streaming = state.streaming && state.streaming.message === message;
    if (message.trimmed) {
      box.appendChild(element("p", "note trimmed",
        `${message.trimmed} earlier message${message.trimmed > 1 ? "s were" : " was"} left out ` +
        "to fit the model's context."));
    }
    const content = element("div", "content");
    if (message.role === "user") {
      content.textContent = message.content;
    } else {
      content.innerHTML = TernMarkdown.render(message.content, !streaming);
      if (streaming) content.classList.add("streaming");
    }
    box.appendChild(content);
    if (message.role === "assistant") {
      if (message.error) box.appendChild(errorElement(message, index));
      if (message.stopped) box.appendChild(element("p", "note stopped", "Stopped."));
      if (message.stats) box.appendChild(statusLine(message.stats));
    }
    if (!streaming) box.appendChild(messageActions(message, index));
    return box;
  }

  function statusLine(stats) {
    const line = element("div", "status");
    const parts = [
      ["prompt-tokens", stats.prompt_tokens, " tokens in"],
      ["completion-tokens", stats.completion_tokens, " out"],
      ["ttft", formatMs(stats.ttft_ms), " to first token"],
      ["total", formatMs(stats.total_ms), " total"],
      ["tokens-per-second", stats.tokens_per_second.toFixed(1), " tokens/s"],
    ];
    parts.forEach(([name, value, label], i) => {
      if (i > 0) line.appendChild(document.createTextNode(" · "));
      const v = element("span", "value", String(value));
      v.dataset.field = name;
      line.append(v, document.createTextNode(label));
    });
    return line;
  }

  function errorElement(message, index) {
    const box = element("div", "error");
    box.dataset.kind = message.error.kind;
    const text = {
      auth: "The server refused the API key. ",
      busy: "The server is busy. ",
      context: "The conversation is too long for the model's context. ",
      network: "The connection to the server was lost. ",
    }[message.error.kind] || "";
    const wait = message.error.retryAfter ? ` (it suggests retrying in ${message.error.retryAfter} s)` : "";
    box.appendChild(element("span", "", text + message.error.message + wait));
    box.appendChild(button("Retry", () => regenerate(index), "retry"));
    return box;
  }

  function messageActions(message, index) {
    const actions = element("div", "actions");
    if (message.role === "user") {
      actions.appendChild(button("Edit", () => editMessage(index), "edit"));
    } else {
      actions.appendChild(button("Copy", async (e) => {
        await copyText(message.content);
        e.target.textContent = "Copied";
        setTimeout(() => { e.target.textContent = "Copy"; }, 1200);
      }, "copy"));
      if (index === state.conversation.messages.length - 1) {
        actions.appendChild(button("Regenerate", () => regenerate(index), "regenerate"));
      }
    }
    return actions;
  }

  function editMessage(index) {
    if (state.streaming) return;
    const message = state.conversation.messages[index];
    const box = $("messages").querySelector(`[data-index="${index}"]`);
    const area = element("textarea", "edit-area");
    area.value = message.content;
    const actions = element("div", "actions");
    actions.append(
      button("Send", () => {
        const text = area.value.trim();
        if (!text) return;
        state.conversation.messages.splice(index);
        state.conversation.messages.push({ role: "user", content: text });
        TernStore.touch(state.conversation);
        renderMessages();
        generate();
      }, "primary"),
      button("Cancel", () => rerenderMessage(index)));
    box.replaceChildren(area, actions);
    area.focus();
  }

  function regenerate(index) {
    if (state.streaming) return;
    state.conversation.messages.splice(index);
    renderMessages();
    generate();
  }

  // ---- sending ----

  function updateComposer() {
    const busy = state.streaming && state.streaming.conversation === state.conversation;
    $("send").hidden = !!busy;
    $("stop").hidden = !busy;
  }

  function send() {
    const text = $("prompt").value.trim();
    if (!text || state.streaming) return;
    $("prompt").value = "";
    state.conversation.messages.push({ role: "user", content: text });
    TernStore.touch(state.conversation);
    renderConversationList();
    renderMessages();
    generate();
  }

  // The messages to send for the answer at `upTo`: the system prompt, then the
  // conversation before it without failed answers.
  function history(conversation, upTo) {
    const out = [];
    if ((conversation.system || "").trim()) out.push({ role: "system", content: conversation.system });
    for (const m of conversation.messages.slice(0, upTo)) {
      if (m.role === "assistant" && (m.error || !m.content)) continue;
      out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  // Drops the oldest turns until the prompt leaves room for the answer; returns
  // [messages, how many were dropped]. A single turn is never dropped: if it alone
  // is too long, the server's error says so.
  async function fitContext(messages) {
    const first = messages[0] && messages[0].role === "system" ? 1 : 0;
    if (!state.model || messages.length - first <= 1) return [messages, 0];
    const max = state.model.max_model_len;
    const asked = samplingFields().max_tokens;
    const reserve = asked || Math.min(512, Math.floor(max / 4));
    let dropped = 0;
    for (;;) {
      let count;
      try {
        count = await TernApi.countTokens(state.model.id, messages);
      } catch (e) {
        return [messages, dropped];  // the chat request will report the problem
      }
      const userTurns = messages.filter((m) => m.role === "user").length;
      if (count + reserve <= max || userTurns <= 1) return [messages, dropped];
      // Remove the oldest user message and the answers that follow it.
      let end = first + 1;
      while (end < messages.length && messages[end].role !== "user") end++;
      dropped += end - first;
      messages = messages.slice(0, first).concat(messages.slice(end));
    }
  }

  async function generate() {
    const conversation = state.conversation;
    const message = { role: "assistant", content: "" };
    conversation.messages.push(message);
    const index = conversation.messages.length - 1;
    const controller = new AbortController();
    state.streaming = { controller, conversation, message };
    renderMessages();

    const isShown = () => state.conversation === conversation;
    let frame = 0;  // a redraw waiting for the next animation frame
    const redraw = () => {
      if (frame || !isShown()) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        if (!isShown()) return;
        const follow = nearBottom();
        rerenderMessage(index);
        if (follow) scrollToBottom();
      });
    };

    let [messages, dropped] = await fitContext(history(conversation, index));
    if (dropped) message.trimmed = dropped;
    const body = Object.assign({ model: state.model ? state.model.id : undefined, messages }, samplingFields());
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await TernApi.streamChat(body, controller.signal, (text) => {
          message.content += text;
          redraw();
        });
        const usage = result.usage || {};
        const timings = result.timings || {};
        message.stats = {
          prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens,
          ttft_ms: timings.ttft_ms || 0, total_ms: timings.total_ms || 0,
          tokens_per_second: timings.tokens_per_second || 0, finish_reason: result.finishReason,
        };
      } catch (e) {
        if (e.name === "AbortError") {
          message.stopped = true;
        } else if (e.kind === "auth" && attempt === 0) {
          await askForKey(TernApi.apiKey() ? "That API key was refused. Enter the server's key." : undefined);
          continue;
        } else {
          message.error = { kind: e.kind || "server", message: e.message, retryAfter: e.retryAfter || 0 };
        }
      }
      break;
    }
    state.streaming = null;
    if (frame) {  // the final render below replaces it; a late one would redraw the finished answer again
      cancelAnimationFrame(frame);
      frame = 0;
    }
    if (TernStore.get(conversation.id)) TernStore.touch(conversation);  // unless deleted meanwhile
    if (isShown()) {
      const follow = nearBottom();
      rerenderMessage(index);
      if (follow) scrollToBottom();
      updateComposer();
    }
    renderConversationList();
  }

  function stop() {
    if (state.streaming) state.streaming.controller.abort();
  }

  // ---- the live panel: the server's own figures ----

  let lastTokens = null;
  async function pollMetrics() {
    try {
      const m = await TernApi.metrics();
      const now = performance.now();
      const tokens = m["vllm:generation_tokens_total"] || 0;
      let rate = 0;
      if (lastTokens) rate = Math.max(0, (tokens - lastTokens.tokens) * 1000 / (now - lastTokens.at));
      lastTokens = { tokens, at: now };
      $("live-running").textContent = String(m["vllm:num_requests_running"] || 0);
      $("live-waiting").textContent = String(m["vllm:num_requests_waiting"] || 0);
      $("live-kv").textContent = ((m["vllm:kv_cache_usage_perc"] || 0) * 100).toFixed(1) + "%";
      $("live-rate").textContent = rate.toFixed(1);
      $("live").classList.remove("offline");
      if ($("banner").dataset.reason === "metrics") {
        $("banner").dataset.reason = "";
        hideBanner();
        if (!state.model) loadModel();
      }
    } catch (e) {
      $("live").classList.add("offline");
      if (e.kind === "network") {
        $("banner").dataset.reason = "metrics";
        showBanner("The connection to the server was lost; retrying…", () => pollMetrics());
      }
    }
  }

  // ---- start ----

  function init() {
    $("key-form").addEventListener("submit", onKeyEntered);
    $("new-chat").addEventListener("click", newConversation);
    $("menu").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
    $("settings-toggle").addEventListener("click", () => { $("settings").hidden = !$("settings").hidden; });
    $("stop").addEventListener("click", stop);
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
      }
    });
    $("system-prompt").addEventListener("input", () => {
      state.conversation.system = $("system-prompt").value;
      TernStore.persist();
    });
    for (const id of ["temperature", "top-p", "max-tokens"]) $(id).addEventListener("change", saveSettings);
    loadSettings();
    openConversation(TernStore.current().id);
    loadModel();
    pollMetrics();
    setInterval(pollMetrics, 1500);
  }

  init();
})();
