"""Sharing a saved chat, the whole path in a real Chromium against the real app and engine:
``/share`` in the chat, the page in a browser without login, ``/unshare``.  QR codes are read
back with zbar's ``zbarimg``."""

from __future__ import annotations


import asyncio
import statistics
import time

import httpx
import pytest

from app.pages.share_page import SCRIPT
from tests.support.screenshots import screenshot_path
from tests.support.settings import start_app
from tests.support.browser import log_in, send, LINK, command
from tests.support.browser import finished_replies
from tests.support.share import decoded, XSS
from tests.support.chat import chats, run
from tests.support.share import heavy_shared_chat


# --- the whole path, in a real browser -----------------------------------------------

@pytest.fixture(scope="module")
def sharing_app(engine, tmp_path_factory):
    """Saved chats on SQLite with two users."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("share")
    yield from start_app(tmp, engine_url=settings.engine_base_url, ignore_eos=True, max_tokens=24,
                         chat_db=tmp / "chats.db", users="alice:wonderland,bob:builder")


def test_a_shared_chat_is_read_by_link_and_qr_code_without_login_until_unshared(page_factory, sharing_app,
                                                                                 tmp_path):
    owner = page_factory(sharing_app.app_url)
    log_in(owner, "alice", "wonderland")
    send(owner, XSS)
    finished_replies(owner, 1)
    shared_message = command(owner, "/share", "/unshare")
    link = LINK.search(shared_message.inner_text()).group(0)
    assert link.startswith(sharing_app.app_url + "/shared/")
    qr = shared_message.locator('img[alt="qr.png"]')
    qr.wait_for(timeout=30_000)
    qr.scroll_into_view_if_needed()
    owner.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=qr.element_handle(),
                            timeout=30_000)
    qr.screenshot(path=tmp_path / "qr.png")
    assert decoded(tmp_path / "qr.png") == link

    reader = page_factory(link)  # another browser context: no login cookie
    reader.get_by_text("bold").first.wait_for(timeout=30_000)
    assert reader.locator("main strong").first.inner_text() == "bold"
    assert "<script>window.pwned = 1</script>" in reader.locator("main").inner_text()
    assert reader.locator("main .assistant").count() == 1
    assert reader.evaluate("window.pwned") is None
    assert reader.locator("input, textarea, form, button, #chat-input").count() == 0
    assert reader.locator("script").all_text_contents() == [SCRIPT]  # the page's own, alone
    reader.screenshot(path=screenshot_path("shared-chat.png", tmp_path), full_page=True)
    assert httpx.post(link, timeout=10).status_code == 405

    live = page_factory(f"{sharing_app.app_url}/live?shared={link.rsplit('/', 1)[1]}")
    live.locator("#shared img").wait_for(timeout=30_000)
    assert live.locator("#shared figcaption").inner_text() == link
    live.locator("#shared img").screenshot(path=tmp_path / "qr-live.png")
    assert decoded(tmp_path / "qr-live.png") == link

    command(owner, "/unshare", "taken back")
    gone = httpx.get(link, timeout=10)
    unknown = httpx.get(link[:-4] + "AAAA", timeout=10)
    assert gone.status_code == unknown.status_code == 404 and gone.text == unknown.text
    assert httpx.get(f"{link}/qr.svg", timeout=10).status_code == 404


def test_another_user_shares_only_their_own_chat(page_factory, sharing_app):
    alices = page_factory(sharing_app.app_url)
    log_in(alices, "alice", "wonderland")
    send(alices, "Alice's secret plan")
    finished_replies(alices, 1)
    alice_link = LINK.search(command(alices, "/share", "/unshare").inner_text()).group(0)

    bobs = page_factory(sharing_app.app_url)
    log_in(bobs, "bob", "builder")
    command(bobs, "/share", "Nothing to share")  # a chat with nothing in it yet
    send(bobs, "Bob's own question")
    finished_replies(bobs, 1)
    bob_link = LINK.search(command(bobs, "/share", "/unshare").inner_text()).group(0)
    assert bob_link != alice_link
    bob_page = httpx.get(bob_link, timeout=10).text
    assert "own question" in bob_page and "secret plan" not in bob_page


def test_chainlits_own_sharing_routes_answer_404(sharing_app):
    """Chainlit's PUT /project/thread/share would let the author mark a thread shared, and its
    GET /project/share/<id> would then give it to anyone without login, past /unshare."""
    url = sharing_app.app_url
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/login", data={"username": "alice", "password": "wonderland"}).status_code == 200
        cookie = "; ".join(f"{name}={value}" for name, value in http.cookies.items())

    async def chat() -> str:
        [session] = await chats(url, cookie, ["A chat to share the wrong way."])
        await session.ask()
        await session.close()
        return session.record.thread_id
    thread = run(chat())
    listing = {"pagination": {"first": 50}, "filter": {}}
    deadline = time.monotonic() + 30  # saved in the background: the author's own list shows it
    while thread not in [t["id"] for t in httpx.post(f"{url}/project/threads", json=listing, timeout=30,
                                                      headers={"Cookie": cookie}).json()["data"]]:
        assert time.monotonic() < deadline, "the chat was not saved"
        time.sleep(0.5)
    shared = httpx.put(f"{url}/project/thread/share", json={"threadId": thread, "isShared": True},
                       headers={"Cookie": cookie}, timeout=30)
    assert shared.status_code == 404, shared.text
    for headers in ({}, {"Cookie": cookie}):
        read = httpx.get(f"{url}/project/share/{thread}", headers=headers, timeout=30)
        assert read.status_code == 404 and "A chat to share" not in read.text, read.text


def test_many_views_of_a_heavy_shared_chat_keep_other_users_served(sharing_app):
    """A chat of 1 MB of emphasis-heavy Markdown, shared, its page asked 24 times at once and
    again, without login: another user's GET /user stays fast meanwhile. Rendered on the event
    loop at every view, each view took seconds and held every other request."""
    url = sharing_app.app_url
    link = run(heavy_shared_chat(str(sharing_app.chat_db), "alice", url))
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/login", data={"username": "bob", "password": "builder"}).status_code == 200
        bob = dict(http.cookies)

    async def attack() -> tuple[list[int], list[float]]:
        async with httpx.AsyncClient(timeout=120) as anonymous, \
                httpx.AsyncClient(base_url=url, cookies=bob, timeout=30) as other:
            waits, done = [], asyncio.Event()

            async def other_user():
                while not done.is_set():
                    started = time.perf_counter()
                    assert (await other.get("/user")).status_code == 200
                    waits.append(time.perf_counter() - started)
                    await asyncio.sleep(0.1)
            watcher = asyncio.create_task(other_user())
            answers = []
            for _ in range(2):  # a first wave renders the page once; the second reads it kept
                answers += await asyncio.gather(*(anonymous.get(link) for _ in range(24)))
            done.set()
            await watcher
            return answers, waits
    answers, waits = asyncio.run(attack())
    print(f"another user's GET /user during 48 views: {len(waits)} asked, slowest {max(waits):.2f} s")
    assert [a.status_code for a in answers] == [200] * 48
    assert len({a.text for a in answers}) == 1   # one page, however many asked
    # The latest exchanges, up to the page's bound; the earlier ones named, not rendered.
    assert "The 40 earlier exchanges of this long chat are not shown here." in answers[0].text
    # Rendered on the event loop, each of 24 views held the others' requests for seconds; a
    # loaded machine (the other test process starting a vLLM) once made one wait 1.2 s.
    assert len(waits) >= 3 and statistics.median(waits) < 0.5 and max(waits) < 3.0, waits


def test_one_address_asking_for_shared_pages_in_a_burst_is_held_back_alone(sharing_app):
    """Anyone with a link asks without login: a burst of GETs of a shared page and its QR code
    from one address gets 429 with Retry-After past ERNIE_SHARED_REQUESTS_PER_MIN (its
    default), while another address is still served. Each names its address in
    X-Forwarded-For, which the app takes from this machine only (uvicorn's
    forwarded_allow_ips, as from HAProxy)."""
    url = sharing_app.app_url
    link = run(heavy_shared_chat(str(sharing_app.chat_db), "alice", url, turns=1))
    limit = sharing_app.shared_requests_per_min
    attacker, other = {"X-Forwarded-For": "203.0.113.7"}, {"X-Forwarded-For": "198.51.100.9"}

    async def burst() -> tuple[list[httpx.Response], float, list[httpx.Response]]:
        async with httpx.AsyncClient(timeout=60) as http:
            started, answers = time.monotonic(), []
            for wave in range(0, limit + 80, 20):
                answers += await asyncio.gather(*(http.get(f"{link}/qr.svg" if i % 2 else link, headers=attacker)
                                                  for i in range(wave, wave + 20)))
            took_s = time.monotonic() - started
            return answers, took_s, [await http.get(link, headers=other),
                                     await http.get(f"{link}/qr.svg", headers=other)]
    answers, took_s, others = asyncio.run(burst())
    codes = [answer.status_code for answer in answers]
    served = codes.count(200)
    print(f"a burst of {len(codes)} GETs from one address in {took_s:.1f} s: {served} served, "
          f"{codes.count(429)} refused (ERNIE_SHARED_REQUESTS_PER_MIN={limit}); another address: "
          f"{[answer.status_code for answer in others]}")
    assert set(codes) == {200, 429}, codes
    # The whole minute at once, then it comes back evenly: a few more in the seconds the burst took.
    assert limit <= served <= limit + took_s * limit / 60 + 1, (served, took_s)
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "Too many requests for shared chats from your address" in refused.text
    assert "no-store" in refused.headers["cache-control"]
    assert [answer.status_code for answer in others] == [200, 200]
    assert "a heavy chat" in others[0].text
