// Conversations kept in the browser (localStorage): several conversations,
// each with its system prompt and messages; which one is open; the sampling
// settings. A message is {role, content} plus, for answers, `stats` (the
// status line's figures) and `error`. Nothing here talks to the server.
"use strict";

const TernStore = (() => {
  const kConversations = "tern.conversations";
  const kCurrent = "tern.current";
  const kSettings = "tern.settings";

  function load(key, fallback) {
    try {
      const value = JSON.parse(localStorage.getItem(key));
      return value === null ? fallback : value;
    } catch (e) {
      return fallback;
    }
  }

  function save(key, value) {
    try {
      localStorage.setItem(key, JSON.stringify(value));
      return true;
    } catch (e) {  // storage full or disabled: the page still works, unsaved
      return false;
    }
  }

  let conversations = load(kConversations, []);
  if (!Array.isArray(conversations)) conversations = [];

  function newId() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  }

  function create() {
    const conversation = { id: newId(), title: "New chat", system: "", messages: [], updated: Date.now() };
    conversations.unshift(conversation);
    setCurrent(conversation.id);
    persist();
    return conversation;
  }

  function persist() {
    return save(kConversations, conversations);
  }

  function all() {
    return conversations;
  }

  function get(id) {
    return conversations.find((c) => c.id === id) || null;
  }

  function current() {
    return get(localStorage.getItem(kCurrent)) || conversations[0] || create();
  }

  function setCurrent(id) {
    try {
      localStorage.setItem(kCurrent, id);
    } catch (e) { /* unsaved */ }
  }

  function remove(id) {
    conversations = conversations.filter((c) => c.id !== id);
    persist();
  }

  // Marks `conversation` changed: it moves to the top of the list and is saved.
  function touch(conversation) {
    conversation.updated = Date.now();
    if (conversation.title === "New chat") {
      const first = conversation.messages.find((m) => m.role === "user");
      if (first) conversation.title = first.content.replace(/\s+/g, " ").trim().slice(0, 40) || "New chat";
    }
    conversations = [conversation, ...conversations.filter((c) => c.id !== conversation.id)];
    persist();
  }

  function settings() {
    return Object.assign({ temperature: "", top_p: "", max_tokens: "" }, load(kSettings, {}));
  }

  function saveSettings(value) {
    save(kSettings, value);
  }

  return { all, get, current, create, setCurrent, remove, touch, persist, settings, saveSettings };
})();
