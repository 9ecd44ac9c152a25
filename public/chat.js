/* Names for the icon-only buttons of Chainlit 2.12's page, which has none for them (axe's
   rule button-name: a screen reader says only "button"). The words are those of Chainlit's
   own tooltips for these buttons (.chainlit/translations), in English or Chinese as the page
   is. A button that already has a name keeps it; the model picker, a combobox, takes none
   from its text. The attach button is a real button that its drop zone marks as
   "presentation", a role that hides it, and its name, from a screen reader. */
(() => {
  const NAMES = {
    "#sidebar-trigger-button": ["Past Chats", "历史对话"],
    "#new-chat-button": ["New Chat", "新建对话"],
    "#chat-profiles": ["Model", "模型"],
    "#upload-button": ["Attach files", "附加文件"],
    "#chat-settings-open-modal": ["Settings panel", "设置面板"],
    "#chat-submit": ["Send message", "发送消息"],
    "#stop-button": ["Stop Task", "停止任务"],
    ".positive-feedback-off, .positive-feedback-on": ["Helpful", "有帮助"],
    ".negative-feedback-off, .negative-feedback-on": ["Not helpful", "没有帮助"],
    // The copy button of a message: its class is literally "undefined" in Chainlit 2.12.
    ".step button.undefined": ["Copy to clipboard", "复制到剪贴板"],
    "#search-chats-button": ["Search", "搜索"],
    // Saved prompts (with saved chats): the composer's star opens the list; a message's star
    // saves it, and its words are ours.
    ".favorite-popover-wrapper button": ["Use a favorite message", "使用收藏的消息"],
    ".step button.favorite-message": ["Save as a favorite message", "收藏这条消息"],
    // A message's pencil, the round arrow over the messages when they are scrolled up:
    // Chainlit has no words for them, these are ours.
    ".step button.edit-message": ["Edit", "编辑"],
    "div.absolute.bottom-4.justify-center > button.rounded-full": ["Scroll to the latest message",
                                                                   "滚动到最新消息"],
  };
  // Lists that are not: the sidebar's outer "list" holds the saved chats' groups in a div,
  // which a list may not hold; it is a wrapper, and says so.
  const NOT_LISTS = 'ul[data-sidebar="menu"]:has(> #thread-history)';
  const chinese = () => /^zh/i.test(document.documentElement.lang || navigator.language || "");
  let queued = false;
  function name() {
    queued = false;
    for (const list of document.querySelectorAll(NOT_LISTS)) list.setAttribute("role", "none");
    const which = chinese() ? 1 : 0;
    for (const [selector, words] of Object.entries(NAMES)) {
      for (const button of document.querySelectorAll(selector)) {
        const unnamed = !button.textContent.trim() || button.getAttribute("role") === "combobox";
        if (!button.hasAttribute("aria-label") && unnamed) {
          button.setAttribute("aria-label", words[which]);
        }
        if (button.getAttribute("role") === "presentation") button.removeAttribute("role");
      }
    }
  }
  // Once a frame at most, however many tokens a streaming reply adds meanwhile.
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(name); }
  }).observe(document.documentElement, { childList: true, subtree: true });
  name();
})();
