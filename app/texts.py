"""Everything the chat says to the user, in English and Simplified Chinese.

The language follows the browser (Chainlit passes its Accept-Language); any
``zh*`` language gets Chinese, everything else English.
"""

from __future__ import annotations

import math

FIGURES_MARK = "\n\n*⏱ "  # starts the figures line appended to a finished reply


def without_figures(shown: str) -> str:
    """A reply as the model wrote it, from the text the chat shows and saves."""
    return shown.split(FIGURES_MARK)[0]

TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "welcome": "Hello! I am **{model}**, served by {server}. Ask me anything; "
                   "the figures under each reply show how fast it came.",
        "server_vllm": "vLLM at {url}",
        "server_llamacpp": "llama.cpp's server at {url}",
        "server_other": "an OpenAI-compatible server at {url}",
        "window_server": "Context window: {window} tokens, as the server reports.",
        "window_setting": "Context window: {window} tokens, from ERNIE_CONTEXT_WINDOW (the server "
                          "does not report one).",
        "window_default": "Context window: assumed {window} tokens (the server does not report one; "
                          "set ERNIE_CONTEXT_WINDOW).",
        "count_vllm": "Prompts are counted exactly by vLLM.",
        "count_llamacpp": "Prompts are counted by llama.cpp's tokenizer.",
        "count_estimate": "Prompts are estimated from their length in characters, with a margin: "
                          "this server cannot count tokens.",
        "live_link": "📈 [Live view]({path}) for presenters: speed, queue and cache, every second.",
        "no_metrics": "The server at {url} has no vLLM /metrics, so its load (KV cache, queue) "
                      "cannot be shown; the figures under each reply still are.",
        "server_too_long": "The server refused the conversation as too long for the model ({detail}). "
                           "Start a new chat, or set ERNIE_CONTEXT_WINDOW lower.",
        "demo": "⚠️ This is the built-in **demo model**: a tiny network trained for a minute, so "
                "its replies are word salad. It shows the stack working; set `ERNIE_MODEL` to a "
                "real checkpoint for real answers.",
        "figures": "{ttft} to first token · {tps} · {prompt} prompt + {completion} reply tokens",
        # The model picker (app/model_choice.py), with ERNIE_MODELS
        "model_profile": "Context window: {window} tokens. Recent speed: {speed}.",
        "model_speed": "{tps} tokens/s (median of the last replies)",
        "model_no_replies": "no replies yet",
        "model_unknown": "ℹ️ The model this chat asked for is not served here: it goes on with "
                         "**{model}**.",
        "model_loading": "⏳ Loading **{model}** … ({took}); the reply follows once it is loaded.",
        "model_load_took": "took {seconds:.0f} s last time",
        "model_load_first": "first start",
        "model_asleep": "ℹ️ **{model}** is not loaded now: it starts with your first message.",
        "dropped": "ℹ️ The conversation is longer than the model's {limit}-token window, so the "
                   "{n} oldest exchange(s) were left out of this request.",
        "stopped": "⏹ Stopped. The text above is kept.",
        "too_long": "Your message is {tokens} tokens long; the model takes at most {limit} tokens "
                    "of prompt. Shorten it or split it into parts.",
        "unreachable": "The engine at {url} is not reachable. Is `./scripts/up` running? If it "
                       "was just started, vLLM may still be loading: try again in a minute.",
        "loading": "The engine is still starting or is restarting. Try again in a moment.",
        "interrupted": "The engine stopped in the middle of this reply, and no engine answered "
                       "within {wait:.0f} s to continue it. The text above is kept; send your "
                       "message again in a minute.",
        "cut": "The engine closed the connection before this reply began (it stopped or is "
               "restarting), and no engine answered within {wait:.0f} s. Send your message "
               "again in a minute.",
        "engine_restarting": "⏳ The engine stopped during this reply and is restarting; the reply "
                             "goes on here when it is back (waiting up to {wait:.0f} s).",
        "engine_waiting": "⏳ The engine stopped answering during this reply; the reply goes on "
                          "here if it is back within {wait:.0f} s.",
        "continued": "↻ continued after its engine stopped",
        "taken_over": "↻ continued after its chat server stopped",
        "timeout": "No reply from the engine for {seconds:.0f} s: it is overloaded or hung. "
                   "Try again; if it persists, check `llm.log` or run `./scripts/ernie-chat doctor`.",
        "auth": "The engine refused the API key. Set the same `ERNIE_API_KEY` for the engine and "
                "the app.",
        "model_missing": "The engine does not serve the model `{model}`. Restart the app so it "
                         "picks up the engine's model.",
        "bad_request": "The engine rejected the request: {detail}",
        "engine_error": "The engine reported an error during the reply: {detail}. Try again.",
        "internal": "Something went wrong in the app ({detail}). Try again.",
        "empty": "The message is empty: type some text first.",
        "moved": "↪ The chat server this chat was on stopped, so it continues on another one. A "
                 "reply that was streaming is lost, and the earlier messages are no longer in the "
                 "model's memory: repeat what matters.",
        "moved_saved": "↪ The chat server this chat was on stopped, so it continues on another "
                       "one with its saved history. A reply that was streaming carries on from its "
                       "saved text.",
        "moved_kept": "↪ The chat server this chat was on stopped, so it continues on another one, "
                      "which kept its history. A reply that was streaming carries on from where it "
                      "was last kept.",
        "regenerate": "Regenerate",
        "regenerate_tip": "A new reply to the same message; the earlier one is kept (◀ ▶).",
        "version_at": "{k}/{n}",
        "version_tip": "Version {k} of {n}: ◀ ▶ switch; the model, /export and the saved chat "
                       "get the one shown.",
        "files_refused": "Not sent to the model, because of the attached file(s):\n{problems}\n\n"
                         "Your text is kept above: send it again without that file.",
        "file_too_big": "**{name}** is {size_mb} MB; a file may have at most {limit_mb} MB.",
        "file_empty": "**{name}** is empty.",
        "upload_empty": "{name} is empty: there is nothing to read.",
        "file_image": "**{name}** is an image, and this model reads text only.",
        "file_binary": "**{name}** is not text (binary data). Attach text, code, CSV, JSON or a PDF "
                       "with text.",
        "file_encoding": "**{name}** is neither UTF-8 nor GBK/GB18030 nor Windows-1252 text: save it "
                         "as UTF-8 and attach it again.",
        "pdf_no_text": "**{name}** has no text layer ({pages} page(s), e.g. a scan): run OCR on it or "
                       "paste its text.",
        "pdf_unreadable": "**{name}** could not be read as a PDF ({detail}).",
        "pdf_too_many_pages": "**{name}** has {pages} pages; a PDF may have at most {limit}: "
                              "attach the pages that matter.",
        "pdf_too_slow": "**{name}** took longer than {seconds} s to read (a PDF built to be slow to "
                        "parse, or a very complex one): attach the pages that matter, or paste "
                        "their text.",
        "pdf_too_much_memory": "**{name}** needs more than {limit_mb} MB of memory to read (a PDF "
                               "that unpacks to huge streams, or a damaged one): attach the pages "
                               "that matter, or paste their text.",
        "pdf_too_much_text": "**{name}** holds more than {limit_mb} MB of text, more than a message "
                             "can take: attach the pages that matter.",
        "upload_too_big": "This upload is larger than {limit_mb} MB, the most one file may have: "
                          "attach a smaller file, or the part that matters.",
        "too_many_files": "{name}: at most {limit} files per message.",
        "file_decoded": "ℹ️ **{name}** is not UTF-8; it was read as {encoding}. If the reply shows "
                        "garbled text, save the file as UTF-8.",
        "too_long_files": "Your message with its attached file(s) is {tokens} tokens long; the model "
                          "takes at most {limit} tokens of prompt. Attach less text or split it.",
        "exported": "This chat ({turns} exchange(s)) as Markdown to read, and as JSON with the "
                    "settings and figures:",
        "export_empty": "Nothing to export yet: ask something first.",
        "seed_label": "Seed (same seed, same reply)",
        "persona_label": "Persona (sets the system prompt)",
        "seed_help": "Empty: a new reply every time. A whole number: the same message and settings "
                     "give the same reply (for QA and demos).",
        "seed_figure": "seed {seed}",
        "bad_seed": "Settings not applied: the seed {value} is not a whole number from 0 to {max}. "
                    "Leave it empty for a different reply each time.",
        "export_you": "You",
        "export_settings": "Settings",
        "export_model": "Model",
        # The live view (app/live_view.py)
        "live_title": "ernie-chat live",
        "live_tokens": "Tokens per second",
        "live_requests": "Requests running / waiting",
        "live_kv": "KV cache in use",
        "live_chats": "Chats connected",
        "live_ttft": "Time to first token, last replies",
        "live_no_metrics": "This server has no vLLM /metrics: tokens/s and running requests are this "
                           "chat app's own; KV cache and waiting requests cannot be shown.",
        "live_engine_down": "The engine does not answer.",
        "live_login": "Log in to the chat first, then reload this page.",
        "live_app_down": "The chat app does not answer.",
        "live_unknown_model": "No model of that name is served here; showing every model.",
        "login_throttled": "Too many failed logins: try again in {seconds} s.",
        # Sign-in through an OpenID Connect provider, refused (app/oidc.py)
        "oidc_refused_title": "No access to this chat",
        "oidc_not_allowed": "You signed in as <b>{name}</b>, but that account may not use this chat "
                            "(it is outside the allowed e-mail domains or groups). Ask an "
                            "administrator for access, or sign in with another account.",
        "oidc_no_name": "The sign-in provider did not say who you are, so this chat cannot let you in. "
                        "Ask an administrator to check the chat's sign-in settings.",
        "oidc_try_again": "Sign in again",
        "oidc_provider_sign_out": "Sign out at the provider (to use another account)",
        "limit_messages": "⏳ You have sent {amount} messages within a minute, as many as one user "
                          "may. Try again in {when}.",
        "limit_tokens": "⏳ You have used the {amount} tokens one user may use in 24 hours. Try "
                        "again in {when}.",
        "busy_wait": "⏳ Busy: {ahead} ahead of you, about {when}. Your reply starts when its "
                     "turn comes.",
        "busy_refused": "⏳ Busy: {ahead} ahead of you, about {when}. Please try again then.",
        "when_s": "{n} s",
        "when_min": "{n} min",
        "when_h": "{h} h {m} min",
        "when_unknown": "a short while",
        # The admin page (app/admin_page.py)
        "admin_title": "ernie-chat admin",
        "admin_period": "The last {days} days, {first} to {last} (UTC). Other periods: ?days=N "
                        "(1 to {max}); the same figures as JSON: {json}.",
        "admin_day": "Day",
        "admin_user": "User",
        "admin_users": "Users",
        "admin_chats": "Chats",
        "admin_messages": "Messages",
        "admin_replies": "Replies",
        "admin_prompt_tokens": "Prompt tokens",
        "admin_reply_tokens": "Reply tokens",
        "admin_errors": "Errors",
        "admin_errors_by_kind": "Errors by kind",
        "admin_nothing": "No messages, replies or errors.",
        "admin_busiest": "Busiest chats",
        "admin_title_column": "Title",
        "admin_last": "Last message (UTC)",
        "admin_unknown_user": "(no name)",
        "admin_no_chat_db": "Saved chats are off (ERNIE_CHAT_DB unset): chats and messages are not "
                            "counted; replies, tokens and errors come from the usage log.",
        "admin_no_login": "There is no admin page: login is off. Set ERNIE_USERS and ERNIE_ADMINS "
                          "(or ERNIE_OIDC_ISSUER and ERNIE_OIDC_ADMIN_GROUP) to who may see it.",
        "admin_login_first": "The admin page is for admins: log in first.",
        "admin_login_link": "Log in",
        "admin_not_admin": "Your login ({user}) is not an admin: the admin page is for those named in "
                           "ERNIE_ADMINS or in the provider's ERNIE_OIDC_ADMIN_GROUP.",
        "admin_bad_days": "days must be a whole number from 1 to {max}, not {value}.",
        # Shared chats (app/share_links.py, app/share_page.py)
        "shared": "🔗 This chat is shared, read-only: {link}\n\nAnyone with the link can read it, "
                  "and follow it as it goes on, but not write in it. `/unshare` takes the link "
                  "back. For an audience: [the QR code on the live view]({live}).",
        "unshared": "The link to this chat is taken back: it now answers \"not found\".",
        "unshare_none": "This chat has no link to take back.",
        "share_nothing": "Nothing to share yet: ask something first.",
        "share_not_owner": "Only the user who started this chat can share it.",
        "share_needs_db": "Sharing needs saved chats: ERNIE_CHAT_DB and ERNIE_USERS.",
        "share_qr_alt": "QR code of this chat's link",
        "share_page_note": "A shared chat, read-only. It follows the chat: this page reloads "
                           "every {seconds} s.",
        "share_not_found": "No shared chat here: the link is wrong, or it was taken back.",
        "share_untitled": "Shared chat",
        "search_too_long": "The search is too long: at most {limit} characters. Search for a few "
                           "words of the chat.",
        # /compare (app/compare.py)
        "compare_usage": "Type `{command} <question>` to send one question to every served model at "
                         "once and see their replies side by side.",
        "compare_needs_models": "`{command}` needs several models: set `ERNIE_MODELS` with two or "
                                "more models (docs/models.md). This chat has one.",
        "compare_title": "⚖️ **{command}**: {question}",
        "compare_stopped": "⏹ Stopped. The text so far is kept.",
        "compare_asleep": "💤 Not loaded now (ERNIE_MODELS_AT_ONCE): a comparison asks the models "
                          "that run. Open a chat on it to start it.",
        "compare_not_history": "Not part of the conversation: the chat's model does not see it.",
    },
    "zh": {
        "welcome": "你好！我是 **{model}**，由{server}提供服务。请随便问吧；每条回复下方显示速度数据。",
        "server_vllm": " {url} 上的 vLLM ",
        "server_llamacpp": " {url} 上的 llama.cpp 服务器",
        "server_other": " {url} 上的 OpenAI 兼容服务器",
        "window_server": "上下文窗口：{window} 个 token（服务器报告）。",
        "window_setting": "上下文窗口：{window} 个 token，来自 ERNIE_CONTEXT_WINDOW（服务器未报告）。",
        "window_default": "上下文窗口：假定为 {window} 个 token（服务器未报告；请设置 ERNIE_CONTEXT_WINDOW）。",
        "count_vllm": "提示长度由 vLLM 精确计算。",
        "count_llamacpp": "提示长度由 llama.cpp 的分词器计算。",
        "count_estimate": "提示长度按字符数估算（留有余量）：此服务器无法计算 token。",
        "live_link": "📈 [实时面板]({path})：速度、队列和缓存，每秒更新，适合演示。",
        "no_metrics": "{url} 上的服务器没有 vLLM 的 /metrics，因此无法显示其负载（KV 缓存、队列）；"
                      "每条回复下方的速度数据仍然可用。",
        "server_too_long": "服务器认为对话超出了模型的长度上限（{detail}）。请开始新对话，或把 "
                           "ERNIE_CONTEXT_WINDOW 设得小一些。",
        "demo": "⚠️ 这是内置的**演示模型**：一个只训练了一分钟的小网络，回复没有实际意义，"
                "只用来展示整套系统在运行。设置 `ERNIE_MODEL` 为真实模型即可获得真正的回答。",
        "figures": "首字 {ttft} · {tps} · 提示 {prompt} + 回复 {completion} 个 token",
        "model_profile": "上下文窗口：{window} 个 token。最近速度：{speed}。",
        "model_speed": "每秒 {tps} 个 token（最近几条回复的中位数）",
        "model_no_replies": "还没有回复",
        "model_unknown": "ℹ️ 此对话请求的模型不在这里提供：接下来使用 **{model}**。",
        "model_loading": "⏳ 正在加载 **{model}** …（{took}）；加载完成后开始回复。",
        "model_load_took": "上次用时 {seconds:.0f} 秒",
        "model_load_first": "首次启动",
        "model_asleep": "ℹ️ **{model}** 目前未加载：发送第一条消息时启动。",
        "dropped": "ℹ️ 对话超过了模型 {limit} token 的上下文窗口，本次请求省略了最早的 {n} 轮对话。",
        "stopped": "⏹ 已停止。上面的文字已保留。",
        "too_long": "您的消息有 {tokens} 个 token，模型最多接受 {limit} 个 token 的提示。请缩短或分段发送。",
        "unreachable": "无法连接推理引擎 {url}。`./scripts/up` 是否在运行？如果刚刚启动，vLLM 可能仍在加载，请稍后再试。",
        "loading": "推理引擎正在启动或重启，请稍后再试。",
        "interrupted": "推理引擎在回复过程中停止了，{wait:.0f} 秒内没有引擎可以接着生成。上面的文字已保留，"
                       "请稍后重新发送消息。",
        "cut": "推理引擎在回复开始前关闭了连接（已停止或正在重启），{wait:.0f} 秒内没有引擎响应。"
               "请稍后重新发送消息。",
        "engine_restarting": "⏳ 推理引擎在回复过程中停止了，正在重启；恢复后回复会在这里继续"
                             "（最多等待 {wait:.0f} 秒）。",
        "engine_waiting": "⏳ 推理引擎在回复过程中停止响应；如果它在 {wait:.0f} 秒内恢复，回复会在这里继续。",
        "continued": "↻ 原引擎中断后已接着生成",
        "taken_over": "↻ 原聊天服务器停止后已接着生成",
        "timeout": "推理引擎 {seconds:.0f} 秒没有响应：可能过载或卡住。请重试；如果持续出现，请查看 `llm.log` "
                   "或运行 `./scripts/ernie-chat doctor`。",
        "auth": "推理引擎拒绝了 API 密钥。请为引擎和应用设置相同的 `ERNIE_API_KEY`。",
        "model_missing": "推理引擎没有提供模型 `{model}`。请重启应用以获取引擎的模型。",
        "bad_request": "推理引擎拒绝了请求：{detail}",
        "engine_error": "推理引擎在回复过程中出错：{detail}。请重试。",
        "internal": "应用内部出错（{detail}）。请重试。",
        "empty": "消息为空：请先输入文字。",
        "moved": "↪ 此对话所在的聊天服务器已停止，对话转到另一台服务器继续。正在生成的回复已丢失，"
                 "之前的消息也不再在模型的记忆中：请重复重要的内容。",
        "moved_saved": "↪ 此对话所在的聊天服务器已停止，对话带着已保存的历史转到另一台服务器继续。"
                       "正在生成的回复从已保存的文字处继续。",
        "moved_kept": "↪ 此对话所在的聊天服务器已停止，对话带着历史转到另一台服务器继续。"
                      "正在生成的回复从最后保存的文字处继续。",
        "regenerate": "重新生成",
        "regenerate_tip": "对同一条消息生成新的回复；之前的回复会保留（◀ ▶）。",
        "version_at": "{k}/{n}",
        "version_tip": "第 {k} 个版本，共 {n} 个：◀ ▶ 切换；模型、/export 和保存的对话使用显示的版本。",
        "files_refused": "由于附加的文件，消息没有发送给模型：\n{problems}\n\n您的文字保留在上方：请去掉该文件后重新发送。",
        "file_too_big": "**{name}** 大小为 {size_mb} MB；单个文件最多 {limit_mb} MB。",
        "file_empty": "**{name}** 是空文件。",
        "upload_empty": "{name} 是空文件：没有可读取的内容。",
        "file_image": "**{name}** 是图片，而此模型只能读取文字。",
        "file_binary": "**{name}** 不是文本（二进制数据）。请附加文本、代码、CSV、JSON 或带文字层的 PDF。",
        "file_encoding": "**{name}** 既不是 UTF-8，也不是 GBK/GB18030 或 Windows-1252 文本：请另存为 UTF-8 后重新附加。",
        "pdf_no_text": "**{name}** 没有文字层（{pages} 页，例如扫描件）：请先做 OCR 识别，或直接粘贴其文字。",
        "pdf_unreadable": "**{name}** 无法作为 PDF 读取（{detail}）。",
        "pdf_too_many_pages": "**{name}** 有 {pages} 页；PDF 最多 {limit} 页：请只附加需要的页面。",
        "pdf_too_slow": "**{name}** 读取超过 {seconds} 秒（故意构造得难以解析的 PDF，或非常复杂的 PDF）："
                        "请只附加需要的页面，或直接粘贴其文字。",
        "pdf_too_much_memory": "**{name}** 读取需要超过 {limit_mb} MB 内存（解压后极大的 PDF，或已损坏的 PDF）："
                               "请只附加需要的页面，或直接粘贴其文字。",
        "pdf_too_much_text": "**{name}** 含有超过 {limit_mb} MB 的文字，超出一条消息能容纳的量：请只附加需要的页面。",
        "upload_too_big": "本次上传超过 {limit_mb} MB，即单个文件的上限：请附加更小的文件，或只附加需要的部分。",
        "too_many_files": "{name}：每条消息最多 {limit} 个文件。",
        "file_decoded": "ℹ️ **{name}** 不是 UTF-8 编码；已按 {encoding} 读取。如果回复中出现乱码，请将文件另存为 UTF-8。",
        "too_long_files": "您的消息连同附加文件共 {tokens} 个 token，模型最多接受 {limit} 个 token 的提示。请减少附加的文字或分段发送。",
        "exported": "本次对话（{turns} 轮）的导出：Markdown 便于阅读，JSON 含设置和速度数据：",
        "export_empty": "还没有可导出的内容：请先提问。",
        "seed_label": "随机种子（相同种子，相同回复）",
        "persona_label": "角色（设置系统提示词）",
        "seed_help": "留空：每次回复不同。填写整数：相同的消息和设置得到相同的回复（用于测试和演示）。",
        "seed_figure": "种子 {seed}",
        "bad_seed": "设置未生效：种子 {value} 不是 0 到 {max} 之间的整数。留空则每次回复不同。",
        "export_you": "你",
        "export_settings": "设置",
        "export_model": "模型",
        "live_title": "ernie-chat 实时面板",
        "live_tokens": "每秒 token 数",
        "live_requests": "运行中 / 等待中的请求",
        "live_kv": "KV 缓存占用",
        "live_chats": "已连接的对话",
        "live_ttft": "最近回复的首字延迟",
        "live_no_metrics": "此服务器没有 vLLM 的 /metrics：每秒 token 数和运行中的请求来自本聊天应用自身；"
                           "无法显示 KV 缓存和等待中的请求。",
        "live_engine_down": "推理引擎没有响应。",
        "live_login": "请先登录聊天，然后刷新本页。",
        "live_app_down": "聊天应用没有响应。",
        "live_unknown_model": "这里没有这个名字的模型；显示全部模型。",
        "login_throttled": "登录失败次数过多：请在 {seconds} 秒后重试。",
        "oidc_refused_title": "无权使用此聊天",
        "oidc_not_allowed": "您已以 <b>{name}</b> 的身份登录，但该账号无权使用此聊天"
                            "（不在允许的邮箱域名或用户组内）。请向管理员申请权限，或换一个账号登录。",
        "oidc_no_name": "登录服务没有提供您的身份，因此无法让您进入此聊天。请管理员检查聊天的登录设置。",
        "oidc_try_again": "重新登录",
        "oidc_provider_sign_out": "在登录服务处退出（以便换一个账号）",
        "limit_messages": "⏳ 您一分钟内已发送 {amount} 条消息，已达每位用户的上限。请在{when}后重试。",
        "limit_tokens": "⏳ 您已用完每位用户 24 小时内可用的 {amount} 个 token。请在{when}后重试。",
        "busy_wait": "⏳ 繁忙：您前面有 {ahead} 个请求，大约需要{when}。轮到时回复会自动开始。",
        "busy_refused": "⏳ 繁忙：您前面有 {ahead} 个请求，大约需要{when}。请届时再试。",
        "when_s": " {n} 秒",
        "when_min": " {n} 分钟",
        "when_h": " {h} 小时 {m} 分钟",
        "when_unknown": "一小会儿",
        "admin_title": "ernie-chat 管理页",
        "admin_period": "最近 {days} 天，{first} 至 {last}（UTC）。其他时段：?days=N（1 到 {max}）；"
                        "同样的数据的 JSON 版：{json}。",
        "admin_day": "日期",
        "admin_user": "用户",
        "admin_users": "用户数",
        "admin_chats": "对话",
        "admin_messages": "消息",
        "admin_replies": "回复",
        "admin_prompt_tokens": "提示 token",
        "admin_reply_tokens": "回复 token",
        "admin_errors": "错误",
        "admin_errors_by_kind": "各类错误",
        "admin_nothing": "没有消息、回复或错误。",
        "admin_busiest": "最活跃的对话",
        "admin_title_column": "标题",
        "admin_last": "最后一条消息（UTC）",
        "admin_unknown_user": "（无名称）",
        "admin_no_chat_db": "未开启对话保存（未设置 ERNIE_CHAT_DB）：不统计对话和消息；"
                            "回复、token 和错误来自用量日志。",
        "admin_no_login": "没有管理页：登录未开启。请设置 ERNIE_USERS 和 ERNIE_ADMINS（或 ERNIE_OIDC_ISSUER 和 "
                          "ERNIE_OIDC_ADMIN_GROUP）来指定可查看的人。",
        "admin_login_first": "管理页仅供管理员使用：请先登录。",
        "admin_login_link": "登录",
        "admin_not_admin": "你的登录名（{user}）不是管理员：管理页仅供 ERNIE_ADMINS 或登录服务的 "
                           "ERNIE_OIDC_ADMIN_GROUP 中的人使用。",
        "admin_bad_days": "days 必须是 1 到 {max} 之间的整数，而不是 {value}。",
        "shared": "🔗 本对话已共享（只读）：{link}\n\n任何拿到链接的人都能阅读并实时跟随本对话，"
                  "但不能发言。`/unshare` 可收回链接。面向观众：[实时面板上的二维码]({live})。",
        "unshared": "本对话的链接已收回：现在访问会显示“未找到”。",
        "unshare_none": "本对话没有可收回的链接。",
        "share_nothing": "还没有可共享的内容：请先提问。",
        "share_not_owner": "只有发起本对话的用户才能共享它。",
        "share_needs_db": "共享需要保存对话：请设置 ERNIE_CHAT_DB 和 ERNIE_USERS。",
        "share_qr_alt": "本对话链接的二维码",
        "share_page_note": "共享的对话，只读。页面跟随对话，每 {seconds} 秒刷新一次。",
        "share_not_found": "这里没有共享的对话：链接有误，或已被收回。",
        "share_untitled": "共享的对话",
        "search_too_long": "搜索内容太长：最多 {limit} 个字符。请只搜索对话中的几个词。",
        "compare_usage": "输入 `{command} <问题>`，即可把同一个问题同时发给所有模型，并排查看它们的回复。",
        "compare_needs_models": "`{command}` 需要多个模型：请在 `ERNIE_MODELS` 中设置两个或更多模型"
                                "（docs/models.md）。本对话只有一个模型。",
        "compare_title": "⚖️ **{command}**：{question}",
        "compare_stopped": "⏹ 已停止。已生成的文字已保留。",
        "compare_asleep": "💤 当前未加载（ERNIE_MODELS_AT_ONCE）：比较只询问正在运行的模型。"
                          "在它上面开一个对话即可启动它。",
        "compare_not_history": "不属于对话内容：对话的模型看不到它。",
    },
}


def lang_of(locale: str | None) -> str:
    return "zh" if (locale or "").lower().startswith("zh") else "en"


def text(lang: str, key: str, **values) -> str:
    return TEXTS[lang][key].format(**values)


def figures_line(lang: str, stats, seed: int | None = None, taken_over: bool = False,
                 model: str | None = None) -> str:
    """The reply's figures; its marks say when it went on after its engine (``stats.continued``)
    or its chat server (``taken_over``: app/in_flight.py) stopped; ``model`` starts it when
    several models are served (app/model_choice.py)."""
    ttft = f"{stats.ttft_s * 1000:.0f} ms" if stats.ttft_s is not None else "–"
    tps = f"{stats.tokens_per_s:.1f} tok/s" if stats.tokens_per_s else "– tok/s"
    line = text(lang, "figures", ttft=ttft, tps=tps,
                prompt=stats.prompt_tokens if stats.prompt_tokens is not None else "–",
                completion=stats.completion_tokens if stats.completion_tokens is not None else "–")
    if model is not None:
        line = f"{model} · {line}"
    if seed is not None:
        line += f" · {text(lang, 'seed_figure', seed=seed)}"
    if stats.continued:
        line += f" · {text(lang, 'continued')}"
    return f"{line} · {text(lang, 'taken_over')}" if taken_over else line


def refusal(lang: str, refused) -> str:
    """One message for the files that cannot go into the prompt, one line per file."""
    problems = "\n".join(f"- {text(lang, r.reason, name=r.name, **r.values)}" for r in refused)
    return text(lang, "files_refused", problems=problems)


def duration(lang: str, seconds: float | None) -> str:
    """A wait as people say it: seconds, minutes, or hours and minutes, rounded up."""
    if seconds is None:
        return text(lang, "when_unknown")
    whole = max(1, math.ceil(seconds))
    if whole < 90:
        return text(lang, "when_s", n=whole)
    minutes = math.ceil(whole / 60)
    if minutes < 90:
        return text(lang, "when_min", n=minutes)
    return text(lang, "when_h", h=minutes // 60, m=minutes % 60)
