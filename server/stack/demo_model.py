"""Build the built-in demo model: a tiny ERNIE 4.5-shaped network that vLLM can serve.

Why this exists: no model hub is reachable from the machines this project runs and is
tested on, so the real checkpoint (baidu/ERNIE-4.5-0.3B-PT) cannot be downloaded there.
The stack still has to start for real, end to end: vLLM loading an `Ernie4_5ForCausalLM`,
its chat template, streaming, stop tokens, the KV-cache numbers in its log. So we build a
model with the same architecture and the same chat format, under a million parameters
in size, train it for under a minute on `demo_corpus.txt` (short English and
Chinese dialogues) and save it the way a hub checkpoint is saved. Its answers are
sentence-like rather than smart, which is all a demo of the plumbing needs.

The build is deterministic (same corpus, seed and steps give byte-identical weights and
tokenizer), so a rebuild can be compared against an earlier one, and it is written
atomically, so an interrupted build never leaves a half model behind.

Run it with the engine environment's Python (torch, tokenizers, safetensors and
transformers come with vLLM there; nothing from the project is imported):

    python -m server.stack.demo_model OUTDIR [--steps N] [--seed S] [--size small]

``--size small`` builds ``demo-small``: one layer, half the width and a smaller vocabulary,
so that two demo models served together (ERNIE_MODELS) differ in tokenizer and KV shape.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# One thread in the BPE trainer, so the merges cannot depend on thread scheduling; this
# must be set before `tokenizers` is imported.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads otherwise spin for a long time at every barrier. On a small machine that
# is busy with something else (vLLM compiling, tests) that made training ~6x slower; a
# short spin costs ~10% when the machine is idle and keeps a shared one at its fair share.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

import torch  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from server.demo_stamp import DEMO_BUILDER  # noqa: E402  (stdlib only: safe in the engine env)

CORPUS = Path(__file__).with_name("demo_corpus.txt")

UNK, BOS, EOS = "<unk>", "<|begin_of_sentence|>", "<|end_of_sentence|>"
SPECIAL_TOKENS = [UNK, BOS, EOS]  # their list positions are their ids: 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
TURN_HEADERS = ["User: ", "Assistant: "]


@dataclass(frozen=True)
class Size:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int  # of 64 dimensions each: vLLM's CPU attention kernel rejects smaller heads


# The small one's vocabulary still holds each of the corpus's ~900 non-ASCII characters whole.
SIZES = {"default": Size(vocab=3000, hidden=128, intermediate=512, layers=2, heads=2),
         "small": Size(vocab=2000, hidden=64, intermediate=256, layers=1, heads=1)}
HEAD_DIM = 64
CHARACTER_BOOST = 4
# The real model's limit: vLLM checks --max-model-len against it, and the demo should
# accept the same settings as the real checkpoint.
MAX_POSITIONS = 131072

DEFAULT_STEPS = 200
DEFAULT_SEED = 0
# A fixed thread count keeps the float reduction order, and so the weights, the same from
# build to build (on the same kind of CPU); two is what the smallest machine we run on has.
THREADS = 2
SEQ_LEN = 128
BATCH = 24
PEAK_LR = 5e-3
WARMUP_STEPS = 20
PROGRESS_EVERY_S = 5.0

# ERNIE 4.5's chat format:
#   <|begin_of_sentence|>{system}\nUser: {u}\nAssistant: {a}<|end_of_sentence|>User: ...
# A user turn ends with the "Assistant: " header, so a prompt that ends on a user message
# is already a generation prompt. An assistant message that does not follow a user turn
# (a second assistant message, or one right after the system text) writes its own header,
# and add_generation_prompt does the same when no header is open. Content may be a string
# or OpenAI-style parts; text parts are joined and other parts dropped. Roles other than
# system/developer/assistant are rendered as user turns rather than silently lost.
CHAT_TEMPLATE = (
    "{%- macro text_of(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for part in content -%}"
    "{%- if part is string -%}{{- part -}}"
    "{%- elif part is mapping and part.get('type', 'text') == 'text' -%}{{- part.get('text', '') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(header_open=false) -%}"
    "{{- '<|begin_of_sentence|>' -}}"
    "{%- for message in messages -%}"
    "{%- set text = text_of(message['content']) -%}"
    "{%- if message['role'] in ['system', 'developer'] -%}"
    "{{- text + '\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- if not ns.header_open -%}{{- 'Assistant: ' -}}{%- endif -%}"
    "{{- text + '<|end_of_sentence|>' -}}"
    "{%- set ns.header_open = false -%}"
    "{%- else -%}"
    "{{- 'User: ' + text + '\\nAssistant: ' -}}"
    "{%- set ns.header_open = true -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt is defined and add_generation_prompt and not ns.header_open -%}"
    "{{- 'Assistant: ' -}}"
    "{%- endif -%}"
)


def log(message: str) -> None:
    print(f"[demo-model] {message}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_conversations(path: Path) -> list[list[dict]]:
    """Parse blank-line separated blocks of "System:/User:/Assistant:" lines into chats."""
    prefixes = {"System: ": "system", "User: ": "user", "Assistant: ": "assistant"}
    conversations = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        messages: list[dict] = []
        for line in block.strip().splitlines():
            role = next((r for p, r in prefixes.items() if line.startswith(p)), None)
            if role is None and messages:
                messages[-1]["content"] += "\n" + line  # a reply that spans lines
            elif role is not None:
                messages.append({"role": role, "content": line.split(": ", 1)[1]})
        if messages:
            conversations.append(messages)
    return conversations


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE: every string, Chinese and emoji included, round-trips losslessly."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(split_on_markers(texts) + lone_characters(texts), trainer=trainer)
    # A prompt ends in "Assistant: ", so with plain BPE its trailing space would be a lone
    # token followed by an answer word without its usual leading space: a pairing the
    # model never saw in training. As whole added tokens the headers cut the text the same
    # way in training and serving. They stay ordinary text (not special) so that a reply
    # that runs on into a new turn shows it instead of hiding it.
    tokenizer.add_tokens([AddedToken(h, normalized=False, special=False) for h in TURN_HEADERS])
    ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    if ids != [PAD_ID, BOS_ID, EOS_ID]:
        raise RuntimeError(f"special token ids are {ids}, expected [0, 1, 2]")
    return tokenizer


def lone_characters(texts: list[str]) -> list[str]:
    """Every non-ASCII character of the texts, each on its own, CHARACTER_BOOST times.

    A rare Chinese character would otherwise stay two or three byte tokens, and a sampled
    wrong second half decodes to U+FFFD in the reply. These extra counts make BPE merge
    each character into one token before it merges words, so words are whole characters.
    """
    characters = sorted({c for text in texts for c in text if ord(c) > 127})
    return characters * CHARACTER_BOOST


def split_on_markers(texts: list[str]) -> list[str]:
    """The pieces between special tokens and turn headers: what BPE sees when encoding."""
    markers = re.compile("|".join(re.escape(m) for m in SPECIAL_TOKENS + TURN_HEADERS))
    return [piece for text in texts for piece in markers.split(text) if piece]


def render_chat(messages: list[dict], add_generation_prompt: bool = False) -> str:
    # Rendered by the same code that transformers (and so vLLM) serves chats with, so the
    # model trains on exactly the text it will be prompted with.
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        [messages], chat_template=CHAT_TEMPLATE, add_generation_prompt=add_generation_prompt
    )
    return rendered[0]


def save_tokenizer(tokenizer: Tokenizer, outdir: Path) -> None:
    tokenizer.save(str(outdir / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": UNK, "unk_token": UNK}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "model_max_length": MAX_POSITIONS,
        "add_bos_token": False,  # the chat template writes it
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    write_json(outdir / "tokenizer_config.json", config)
    write_json(outdir / "special_tokens_map.json", special)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_model(vocab_size: int, size: Size):
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    config = Ernie4_5Config(
        vocab_size=vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=1,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=500000.0,
        use_bias=False,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    return Ernie4_5ForCausalLM(config)


def token_stream(tokenizer: Tokenizer, conversations: list[list[dict]], seed: int) -> torch.Tensor:
    """All chats rendered through the template, shuffled, as one long run of token ids."""
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    ids: list[int] = []
    for i in order:
        ids += tokenizer.encode(render_chat(conversations[i])).ids
    return torch.tensor(ids, dtype=torch.long)


def learning_rate(step: int, steps: int) -> float:
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model, stream: torch.Tensor, steps: int, seed: int, started: float) -> float:
    """Next-token training on random windows of the stream; returns the last loss."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98),
                                  weight_decay=0.01)
    model.train()
    last_report = time.monotonic()
    loss_value = float("nan")
    for step in range(steps):
        starts = torch.randint(0, len(stream) - SEQ_LEN, (BATCH,), generator=generator)
        batch = torch.stack([stream[s:s + SEQ_LEN] for s in starts.tolist()])
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps)
        loss = model(input_ids=batch, labels=batch).loss  # the model shifts labels itself
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = loss.item()
        now = time.monotonic()
        if now - last_report >= PROGRESS_EVERY_S or step == steps - 1:
            log(f"step {step + 1}/{steps}  loss {loss_value:.3f}  {now - started:.0f}s")
            last_report = now
    model.eval()
    return loss_value


def save_model(model, outdir: Path) -> None:
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a one-shard bar is noise in the setup log

    model.config.dtype = torch.bfloat16
    model.to(torch.bfloat16).save_pretrained(str(outdir), safe_serialization=True)
    GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        do_sample=True, temperature=0.7, top_p=0.9,
    ).save_pretrained(str(outdir))


def make_reproducible(seed: int) -> None:
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def build(outdir: Path, steps: int, seed: int, corpus: Path = CORPUS, size: str = "default") -> dict:
    """Build the model into `outdir` (created or replaced atomically) and return its info."""
    started = time.monotonic()
    make_reproducible(seed)
    conversations = read_conversations(corpus)
    tokenizer = train_tokenizer([render_chat(c) for c in conversations], SIZES[size].vocab)
    log(f"tokenizer: {tokenizer.get_vocab_size()} tokens from {len(conversations)} chats "
        f"({time.monotonic() - started:.1f}s)")
    stream = token_stream(tokenizer, conversations, seed)
    model = build_model(tokenizer.get_vocab_size(), SIZES[size])
    params = sum(p.numel() for p in model.parameters())
    log(f"model: {params:,} parameters, training on {len(stream):,} tokens for {steps} steps")
    final_loss = train(model, stream, steps, seed, started)

    outdir = outdir.resolve()
    staging = outdir.with_name(f"{outdir.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        save_model(model, staging)
        save_tokenizer(tokenizer, staging)
        info = {
            "builder": DEMO_BUILDER,
            "seed": seed,
            "steps": steps,
            "size": size,
            "corpus_sha256": sha256_of(corpus),
            "final_loss": round(final_loss, 4),
            "seconds": round(time.monotonic() - started, 1),
            "model_sha256": sha256_of(staging / "model.safetensors"),
        }
        write_json(staging / "build_info.json", info)
        for path in staging.iterdir():
            path.chmod(0o644)  # the weights come out 0600; whoever serves them must read them
        replace_dir(staging, outdir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return info


def replace_dir(new: Path, target: Path) -> None:
    # A rename cannot overwrite a non-empty directory, so the old model steps aside first;
    # readers see either the old complete model or the new one, never a mix.
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.stack.demo_model", description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=Path, help="directory to write the model to")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed")
    parser.add_argument("--size", choices=sorted(SIZES), default="default", help="the model's size")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    info = build(args.outdir, args.steps, args.seed, args.corpus, args.size)
    log(f"done in {info['seconds']}s, final loss {info['final_loss']}, written to {args.outdir}")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
