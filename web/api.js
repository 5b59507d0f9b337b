// The chat page's calls to the tern server: the model (/v1/models), token
// counts (/tokenize), streamed answers (SSE from /v1/chat/completions), the
// server's figures (/metrics). The API key, when the server wants one, is kept
// in sessionStorage: for this tab's session only.
"use strict";

const TernApi = (() => {
  const kKey = "tern.apiKey";

  // kind: "auth" (401), "busy" (429/503), "context" (prompt too long), "request" (other 4xx),
  // "server" (5xx or an error event mid-stream), "network" (no answer: connection lost).
  class ApiError extends Error {
    constructor(kind, message, status = 0, retryAfter = 0) {
      super(message);
      this.kind = kind;
      this.status = status;
      this.retryAfter = retryAfter;
    }
  }

  function apiKey() {
    return sessionStorage.getItem(kKey) || "";
  }

  function setApiKey(key) {
    if (key) sessionStorage.setItem(kKey, key);
    else sessionStorage.removeItem(kKey);
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (apiKey()) h.Authorization = "Bearer " + apiKey();
    return h;
  }

  async function errorFrom(response) {
    let message = `HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && body.error) message = typeof body.error === "string" ? body.error : body.error.message || message;
    } catch (e) { /* not JSON: keep the status */ }
    const retryAfter = parseInt(response.headers.get("Retry-After") || "0", 10) || 0;
    if (response.status === 401) return new ApiError("auth", message, 401);
    if (response.status === 429 || response.status === 503) {
      return new ApiError("busy", message, response.status, retryAfter);
    }
    if (/maximum context length/i.test(message)) return new ApiError("context", message, response.status);
    if (response.status >= 500) return new ApiError("server", message, response.status);
    return new ApiError("request", message, response.status);
  }

  async function request(path, options = {}) {
    let response;
    try {
      response = await fetch(path, Object.assign({ headers: headers() }, options));
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ApiError("network", "The connection to the server was lost.");
    }
    if (!response.ok) throw await errorFrom(response);
    return response;
  }

  async function model() {
    const body = await (await request("/v1/models")).json();
    return body.data[0];
  }

  // Prompt tokens of `messages` as the server's chat template renders them.
  async function countTokens(modelName, messages) {
    const body = { model: modelName, messages, add_generation_prompt: true };
    const response = await request("/tokenize", { method: "POST", body: JSON.stringify(body) });
    return (await response.json()).count;
  }

  // Streams one answer: onText(piece) for each piece of text as it arrives. Resolves to
  // {finishReason, usage, timings}; rejects with ApiError, or an AbortError when `signal` aborts.
  async function streamChat(body, signal, onText) {
    const payload = Object.assign({}, body, { stream: true, stream_options: { include_usage: true } });
    const response = await request("/v1/chat/completions", { method: "POST", body: JSON.stringify(payload), signal });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const result = { finishReason: null, usage: null, timings: null };
    let buffer = "";
    let done = false;
    while (!done) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (e.name === "AbortError" || signal.aborted) throw new DOMException("stopped", "AbortError");
        throw new ApiError("network", "The connection was lost while the answer was streaming.");
      }
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") {
            done = true;
            break;
          }
          const json = JSON.parse(data);
          if (json.error) throw new ApiError("server", json.error.message || String(json.error));
          if (json.usage) result.usage = json.usage;
          if (json.tern) result.timings = json.tern;
          for (const choice of json.choices || []) {
            if (choice.delta && choice.delta.content) onText(choice.delta.content);
            if (choice.finish_reason) result.finishReason = choice.finish_reason;
          }
        }
      }
    }
    if (!done) throw new ApiError("network", "The answer ended before the server finished it.");
    return result;
  }

  // The server's own figures from the Prometheus text of /metrics (summed over label sets).
  async function metrics() {
    const text = await (await request("/metrics", { headers: {} })).text();
    const values = {};
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      values[match[1]] = (values[match[1]] || 0) + parseFloat(match[3]);
    }
    return values;
  }

  return { ApiError, apiKey, setApiKey, model, countTokens, streamChat, metrics };
})();
