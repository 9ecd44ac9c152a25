"""Everything the chat says to the user, in English and Simplified Chinese.

The language follows the browser (Chainlit passes its Accept-Language); any
``zh*`` language gets Chinese, everything else English.
"""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "welcome": "Hello! I am **{model}**, served by vLLM on this machine. Ask me anything; "
                   "the figures under each reply show how fast it came.",
        "demo": "⚠️ This is the built-in **demo model**: a tiny network trained for a minute, so "
                "its replies are word salad. It shows the stack working; set `ERNIE_MODEL` to a "
                "real checkpoint for real answers.",
        "figures": "{ttft} to first token · {tps} · {prompt} prompt + {completion} reply tokens",
        "dropped": "ℹ️ The conversation is longer than the model's {limit}-token window, so the "
                   "{n} oldest exchange(s) were left out of this request.",
        "stopped": "⏹ Stopped. The text above is kept.",
        "too_long": "Your message is {tokens} tokens long; the model takes at most {limit} tokens "
                    "of prompt. Shorten it or split it into parts.",
        "unreachable": "The engine at {url} is not reachable. Is `./scripts/up` running? If it "
                       "was just started, vLLM may still be loading: try again in a minute.",
        "loading": "The engine is still starting or is restarting. Try again in a moment.",
        "interrupted": "The engine stopped in the middle of this reply; the supervisor restarts "
                       "it. The text above is kept; send your message again in a minute.",
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
                       "one with its saved history. A reply that was streaming may be lost.",
    },
    "zh": {
        "welcome": "你好！我是 **{model}**，由本机的 vLLM 提供服务。请随便问吧；每条回复下方显示速度数据。",
        "demo": "⚠️ 这是内置的**演示模型**：一个只训练了一分钟的小网络，回复没有实际意义，"
                "只用来展示整套系统在运行。设置 `ERNIE_MODEL` 为真实模型即可获得真正的回答。",
        "figures": "首字 {ttft} · {tps} · 提示 {prompt} + 回复 {completion} 个 token",
        "dropped": "ℹ️ 对话超过了模型 {limit} token 的上下文窗口，本次请求省略了最早的 {n} 轮对话。",
        "stopped": "⏹ 已停止。上面的文字已保留。",
        "too_long": "您的消息有 {tokens} 个 token，模型最多接受 {limit} 个 token 的提示。请缩短或分段发送。",
        "unreachable": "无法连接推理引擎 {url}。`./scripts/up` 是否在运行？如果刚刚启动，vLLM 可能仍在加载，请稍后再试。",
        "loading": "推理引擎正在启动或重启，请稍后再试。",
        "interrupted": "推理引擎在回复过程中停止了，守护进程正在重启它。上面的文字已保留，请稍后重新发送消息。",
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
                       "正在生成的回复可能已丢失。",
    },
}


def lang_of(locale: str | None) -> str:
    return "zh" if (locale or "").lower().startswith("zh") else "en"


def text(lang: str, key: str, **values) -> str:
    return TEXTS[lang][key].format(**values)


def figures_line(lang: str, stats) -> str:
    ttft = f"{stats.ttft_s * 1000:.0f} ms" if stats.ttft_s is not None else "–"
    tps = f"{stats.tokens_per_s:.1f} tok/s" if stats.tokens_per_s else "– tok/s"
    return text(lang, "figures", ttft=ttft, tps=tps,
                prompt=stats.prompt_tokens if stats.prompt_tokens is not None else "–",
                completion=stats.completion_tokens if stats.completion_tokens is not None else "–")
