"""What the chat says in English; app/texts/zh.py says the same in Chinese, key for key."""

TEXTS: dict[str, str] = {
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
    # The model picker (app/engine/model_choice.py), with ERNIE_MODELS
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
    "file_gone": "**{name}** is no longer on the server (a file is deleted once read): attach it again.",
    "files_busy": "Not sent to the model: the chat server is busy reading other attached files. "
                  "Nothing is lost: in a moment, edit your message and confirm it as it is, and "
                  "its files are read then.",
    "upload_chat_files": "This chat already holds {limit} attached files not sent yet, the most it "
                         "may hold: send them with a message, or start a new chat, then attach more.",
    "upload_chat_mb": "With this file, this chat's attached files not sent yet would pass {limit_mb} "
                      "MB, the most it may hold: send them with a message, or start a new chat, then "
                      "attach more.",
    "upload_user_files": "Your chats already hold {limit} attached files not sent yet, the most one "
                         "user may hold: send them with a message, or start a new chat (a chat you "
                         "closed lets its files go within an hour), then attach more.",
    "upload_user_mb": "With this file, your chats' attached files not sent yet would pass {limit_mb} "
                      "MB, the most one user may hold: send them with a message, or start a new chat "
                      "(a chat you closed lets its files go within an hour), then attach more.",
    "upload_disk_full": "The server's disk is almost full (less than {floor_mb} MB would be left), so "
                        "it takes no file now: try again later, or tell whoever runs the chat.",
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
    # The live view (app/pages/live_page.py)
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
    # Sign-in through an OpenID Connect provider, refused (app/auth/oidc.py)
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
    "limit_replies": "⏳ You already have {amount} replies being written, as many as one user may "
                     "have at once. Send this again when one has finished, or stop one.",
    "busy_wait": "⏳ Busy: {ahead} ahead of you, about {when}. Your reply starts when its "
                 "turn comes.",
    "busy_refused": "⏳ Busy: {ahead} ahead of you, about {when}. Please try again then.",
    "when_s": "{n} s",
    "when_min": "{n} min",
    "when_h": "{h} h {m} min",
    "when_unknown": "a short while",
    # The admin page (app/pages/admin_page.py)
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
                        "counted and no audit is kept; replies, tokens and errors come from this "
                        "machine's usage log.",
    "admin_audit": "Audit: the newest {n} records",
    "admin_audit_at": "Time (UTC)",
    "admin_audit_action": "Action",
    "admin_audit_address": "Address",
    "admin_audit_detail": "Detail",
    "admin_no_login": "There is no admin page: login is off. Set ERNIE_USERS and ERNIE_ADMINS "
                      "(or ERNIE_OIDC_ISSUER and ERNIE_OIDC_ADMIN_GROUP) to who may see it.",
    "admin_login_first": "The admin page is for admins: log in first.",
    "admin_login_link": "Log in",
    "admin_not_admin": "Your login ({user}) is not an admin: the admin page is for those named in "
                       "ERNIE_ADMINS or in the provider's ERNIE_OIDC_ADMIN_GROUP.",
    "admin_bad_days": "days must be a whole number from 1 to {max}, not {value}.",
    # Shared chats (app/pages/share_links.py, app/pages/share_page.py)
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
    "share_page_stop": "Stop following",
    "share_page_still": "A shared chat, read-only, as it was when this page was loaded.",
    "share_page_follow": "Follow it",
    "share_not_found": "No shared chat here: the link is wrong, or it was taken back.",
    "share_too_many": "Too many requests for shared chats from your address: try again in {seconds} s.",
    "share_page_cut": "The {count} earlier exchanges of this long chat are not shown here.",
    "share_untitled": "Shared chat",
    "search_too_long": "The search is too long: at most {limit} characters. Search for a few "
                       "words of the chat.",
    # /compare (app/conversation/compare.py)
    "compare_usage": "Type `{command} <question>` to send one question to every served model at "
                     "once and see their replies side by side.",
    "compare_needs_models": "`{command}` needs several models: set `ERNIE_MODELS` with two or "
                            "more models (docs/models.md). This chat has one.",
    "compare_title": "⚖️ **{command}**: {question}",
    "compare_stopped": "⏹ Stopped. The text so far is kept.",
    "compare_asleep": "💤 Not loaded now (ERNIE_MODELS_AT_ONCE): a comparison asks the models "
                      "that run. Open a chat on it to start it.",
    "compare_not_history": "Not part of the conversation: the chat's model does not see it.",
}
