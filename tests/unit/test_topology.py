"""The shape of the stack (pure parts): how many of each process, where they listen, the
HAProxy configuration (checked by the real HAProxy), the page's boot cookie, and reading
vLLM's log for the number of API servers it really runs."""

from __future__ import annotations

import itertools
import re
import subprocess

import pytest

from app.web import boot_cookie
from server.chat_db import without_password
from server.errors import ErnieChatError
from server.settings import SettingsError, load_settings
from server.stack import balancer
from server.stack.engine_tier import api_servers_line
from server.stack.topology import auto_api_servers, auto_app_workers, balancer_config, plan_topology
from server.stack.vllm_log import START_MARKER, api_server_count


pytestmark = pytest.mark.usefixtures("clean_env")


def ports(start: int = 41000):
    counter = itertools.count(start)
    return lambda: next(counter)


# --- defaults chosen from the machine ------------------------------------------------------

def test_a_cpu_machine_runs_one_of_each_whatever_its_cores():
    assert auto_api_servers("cpu", 2) == auto_app_workers("cpu", 2) == 1
    assert auto_api_servers("cpu", 64) == auto_app_workers("cpu", 64) == 1


def test_a_gpu_machine_gets_a_quarter_of_its_cores_in_api_servers_and_half_in_workers():
    assert auto_api_servers("cuda", 16) == 4 and auto_app_workers("cuda", 16) == 8
    assert auto_app_workers("cuda", 8) == 4
    assert auto_api_servers("cuda", 128) == 4          # more API servers did not pay (docs/notes.md)
    assert auto_app_workers("cuda", 128) == 8
    assert auto_api_servers("cuda", 2) == auto_app_workers("cuda", 2) == 1


# --- the topology -------------------------------------------------------------------------------

def test_one_of_each_listens_where_the_settings_say_and_needs_no_balancer():
    s = load_settings(engine_port=8000, app_port=8080)
    t = plan_topology(s, "cpu", 2, ports())
    assert [(c.host, c.port) for c in t.copies] == [("127.0.0.1", 8000)]
    assert t.worker_ports == (8080,) and t.worker_host == "127.0.0.1"
    assert not t.needs_balancer and balancer_config(t, s) is None


def test_several_copies_and_workers_sit_on_loopback_behind_the_balancer():
    s = load_settings(engine_host="0.0.0.0", engine_port=8000, app_host="0.0.0.0", app_port=8080, open_chat=True,
                      engine_copies=2, app_workers=3, api_servers=2, gpu_memory_utilization=0.9)
    t = plan_topology(s, "cuda", 16, ports())
    assert [(c.host, c.port, c.index, c.copies, c.api_servers) for c in t.copies] == [
        ("127.0.0.1", 41000, 0, 2, 2), ("127.0.0.1", 41001, 1, 2, 2)]
    assert t.worker_ports == (41002, 41003, 41004) and t.worker_host == "127.0.0.1"
    config = balancer_config(t, s)
    chat, engine = config.frontends
    assert (chat.bind_host, chat.bind_port, chat.sticky, chat.health_path) == ("0.0.0.0", 8080, True, "/")
    assert [b.port for b in chat.servers] == [41002, 41003, 41004]
    assert (engine.bind_port, engine.sticky, engine.health_path) == (8000, False, "/health")
    assert "2 engine copies x 2 API servers, 3 app workers, HAProxy" in t.describe()


# --- HAProxy ----------------------------------------------------------------------------------

def test_the_haproxy_config_pins_browsers_balances_streams_and_checks_health():
    s = load_settings(engine_copies=2, app_workers=2)
    text = balancer.render_haproxy(balancer_config(plan_topology(s, "cpu", 2, ports()), s))
    chat = text.split("\nbackend chat_servers")[1].split("\nfrontend")[0]
    assert f"cookie {balancer.STICKY_COOKIE} insert indirect nocache" in chat
    assert "option forwardfor" in chat                 # the login throttle sees the browser
    assert "http-request del-header X-Forwarded-For\n" in chat   # and not what a client says it is
    assert "server chat0 127.0.0.1:41002 check inter 1s fall 2 rise 1 cookie w0" in chat
    engine = text.split("\nbackend engine_servers")[1]
    assert "balance leastconn" in engine and "option httpchk GET /health" in engine
    assert "cookie" not in engine                     # any copy can serve any request
    assert "timeout tunnel 1h" in text and "option redispatch" in text


def test_trusted_proxies_pass_their_forwarded_for_and_have_no_connection_limit(tmp_path):
    s = load_settings(app_workers=2, app_host="0.0.0.0", users="alice:pw",
                      trusted_proxies="172.18.0.0/16, 10.0.0.9")
    config = balancer_config(plan_topology(s, "cpu", 2, ports()), s)
    path = balancer.write_config(config, tmp_path / "haproxy.cfg", balancer.haproxy_path())  # HAProxy checks it
    chat = path.read_text().split("\nbackend chat_servers")[1].split("\nfrontend")[0]
    assert "http-request del-header X-Forwarded-For if !{ src 172.18.0.0/16 10.0.0.9 }" in chat
    front = path.read_text().split("\nfrontend chat")[1].split("\nbackend")[0]
    assert "reject if { sc0_conn_cur gt 64 } !{ src 172.18.0.0/16 10.0.0.9 }" in front


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("value, says", [("nginx", "is not an address or a network"),
                                         ("0.0.0.0/0", "trusts every address")])
def test_trusted_proxies_must_be_addresses(value, says):
    with pytest.raises(SettingsError, match=says):
        load_settings(trusted_proxies=value)


def test_haproxy_accepts_the_config(tmp_path):
    """The real HAProxy (installed by ./scripts/test) checks the text, not a regex."""
    s = load_settings(engine_copies=2, app_workers=2, app_host="::1")
    config = balancer_config(plan_topology(s, "cpu", 2, ports()), s)
    path = balancer.write_config(config, tmp_path / "haproxy.cfg", balancer.haproxy_path())
    assert "bind [::1]:8080" in path.read_text()
    broken = tmp_path / "broken.cfg"
    broken.write_text(path.read_text().replace("balance leastconn", "balance sometimes"))
    assert subprocess.run([balancer.haproxy_path(), "-c", "-q", "-f", str(broken)]).returncode != 0


def exposed(**overrides):
    return load_settings(**{"engine_host": "0.0.0.0", "engine_port": 8000, "app_host": "0.0.0.0",
                            "app_port": 8080, "users": "alice:pw", "api_key": "k" * 43, **overrides})


def test_an_exposed_tier_sits_behind_haproxy_even_as_one_process():
    s = exposed()
    t = plan_topology(s, "cpu", 2, ports())
    assert [(c.host, c.port) for c in t.copies] == [("127.0.0.1", 41000)]
    assert t.worker_ports == (41001,) and t.worker_host == "127.0.0.1"
    chat, engine = balancer_config(t, s).frontends
    assert (chat.bind_host, chat.bind_port, chat.keyed, chat.per_client) == ("0.0.0.0", 8080, False, 64)
    assert (engine.bind_host, engine.bind_port, engine.keyed, engine.per_client) == ("0.0.0.0", 8000, True, 64)
    # Every 127.x address is this machine's only: such a stack keeps its plain shape.
    assert not plan_topology(load_settings(engine_host="127.0.0.2", app_host="127.0.0.2"), "cpu", 2,
                             ports()).needs_balancer


def test_the_guarded_config_asks_for_the_key_and_limits_each_address(tmp_path):
    s = exposed(connections_per_client=10)
    config = balancer_config(plan_topology(s, "cpu", 2, ports()), s)
    text = balancer.render_haproxy(config)
    assert "timeout http-request 10s" in text                        # slowloris
    assert f"timeout http-keep-alive {s.engine_keepalive_limit_s}s" in text  # past the app's own
    chat = text.split("\nfrontend chat")[1].split("\nbackend")[0]
    engine = text.split("\nfrontend engine")[1].split("\nbackend")[0]
    assert "tcp-request connection reject if { sc0_conn_cur gt 10 }\n" in chat
    assert "{ sc0_conn_cur gt 10 } !{ src 127.0.0.0/8 ::1 }" in engine    # the app's own crowd
    assert '"Bearer ${ERNIE_ENGINE_KEY}"' in engine and "Bearer" not in chat
    assert "unless keyed || { path /health } { method GET HEAD }" in engine
    assert s.api_key_value not in text                                 # the key is in HAProxy's env
    path = balancer.write_config(config, tmp_path / "haproxy.cfg", balancer.haproxy_path(),
                                 balancer.key_env(s.api_key_value))
    assert path.exists()
    with pytest.raises(ErnieChatError, match="ERNIE_API_KEY"):
        balancer.managed_haproxy(config, tmp_path / "h.cfg", tmp_path / "h.log", tmp_path, None)


def test_several_exposed_models_each_get_a_guarded_frontend_on_their_port(tmp_path):
    s = exposed(models="demo,demo-small", app_host="127.0.0.1", connections_per_client=10)
    t = plan_topology(s, "cpu", 2, ports())
    # Each vLLM on a loopback port of its own; the models' ports are HAProxy's.
    assert [(m.served_name, m.port, m.copy.host, m.copy.port) for m in t.models] == [
        ("demo", 8000, "127.0.0.1", 41000), ("demo-small", 8001, "127.0.0.1", 41001)]
    assert t.model_copies == {"demo": t.models[0].copy, "demo-small": t.models[1].copy}
    config = balancer_config(t, s)
    assert [(f.name, f.bind_host, f.bind_port, [(b.host, b.port) for b in f.servers], f.keyed, f.per_client)
            for f in config.frontends] == [
        ("engine", "0.0.0.0", 8000, [("127.0.0.1", 41000)], True, 10),
        ("engine_1_demo-small", "0.0.0.0", 8001, [("127.0.0.1", 41001)], True, 10)]
    assert "2 model engines x 1 API server, 1 app worker, HAProxy in front of the model engines" \
        == t.describe()
    text = balancer.render_haproxy(config)
    for name, port in (("engine", 8000), ("engine_1_demo-small", 8001)):
        front = text.split(f"\nfrontend {name}\n")[1].split("\nbackend")[0]
        assert f"bind 0.0.0.0:{port}\n" in front
        assert "{ sc0_conn_cur gt 10 } !{ src 127.0.0.0/8 ::1 }" in front
        assert "unless keyed || { path /health } { method GET HEAD }" in front
        assert f"default_backend {name}_servers" in front
    path = balancer.write_config(config, tmp_path / "haproxy.cfg", balancer.haproxy_path(),
                                 balancer.key_env(s.api_key_value))
    assert s.api_key_value not in path.read_text()


def test_models_on_loopback_listen_on_their_own_ports_without_a_balancer():
    s = load_settings(models="demo,demo-small", engine_port=9000)
    t = plan_topology(s, "cpu", 2, ports())
    assert [(m.copy.host, m.copy.port) for m in t.models] == [("127.0.0.1", 9000), ("127.0.0.1", 9001)]
    assert not t.needs_balancer and balancer_config(t, s) is None


def test_the_apps_connections_from_the_engines_own_address_are_not_limited():
    """On a LAN address the app reaches the engine there, from that address: a crowd's worth."""
    for host, trusted in (("10.1.2.3", ("127.0.0.0/8", "::1", "10.1.2.3")), ("0.0.0.0", ("127.0.0.0/8", "::1")),
                          ("::", ("127.0.0.0/8", "::1"))):
        s = exposed(engine_host=host, models="demo,demo-small", app_host="127.0.0.1")
        assert {f.trusted for f in balancer_config(plan_topology(s, "cpu", 2, ports()), s).frontends} == {trusted}


def test_a_served_name_cannot_write_into_haproxys_config(tmp_path):
    """Served names are folder names: a newline in one must not add a line to the config, and
    two that sanitize alike must not share a frontend."""
    hostile = tmp_path / "x\n    http-request allow\nfrontend y"
    s = exposed(models=f"demo,{hostile},/m/A B,/m/a-b", app_host="127.0.0.1")
    config = balancer_config(plan_topology(s, "cpu", 2, ports()), s)
    names = [f.name for f in config.frontends]
    assert names[0] == "engine" and len(set(names)) == 4
    assert all(re.fullmatch(r"[a-z0-9_-]+", name) for name in names), names
    text = balancer.render_haproxy(config)
    assert "http-request allow" not in text and "frontend y" not in text
    balancer.write_config(config, tmp_path / "haproxy.cfg", balancer.haproxy_path(),
                          balancer.key_env(s.api_key_value))


def test_a_balancer_on_loopback_limits_no_address_and_asks_for_no_key():
    """Crowd tests and a TLS proxy on this machine come from one address."""
    s = load_settings(engine_copies=2, app_workers=2)
    config = balancer_config(plan_topology(s, "cpu", 2, ports()), s)
    assert [(f.per_client, f.keyed) for f in config.frontends] == [(0, False), (0, False)]
    assert "stick-table" not in balancer.render_haproxy(config)


def test_without_haproxy_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("server.stack.balancer.Path.exists", lambda self: False)
    with pytest.raises(balancer.BalancerMissing, match="apt-get install haproxy.*ERNIE_APP_WORKERS=1"):
        balancer.haproxy_path()


# --- which app process served the page -----------------------------------------------------------

def test_a_page_from_a_process_that_is_gone_means_the_chat_lost_it():
    mine = boot_cookie.BOOT_ID
    assert not boot_cookie.lost_its_process(f"a=1; {boot_cookie.COOKIE}={mine}")
    assert boot_cookie.lost_its_process(f"{boot_cookie.COOKIE}=0123456789abcdef; b=2")
    assert not boot_cookie.lost_its_process("")            # a first visit
    assert not boot_cookie.lost_its_process(None)
    assert not boot_cookie.lost_its_process('bad"cookie')  # not ours to judge


# --- what vLLM's log says about its API servers ---------------------------------------------

SEVERAL = "(MainProcess pid=885) INFO 12-01 14:46:56 [utils.py:261] Started 2 API server processes"
ONE = "(APIServer pid=28166) INFO 12-01 14:42:56 [api_utils.py:347] Starting vLLM server"


def test_the_number_of_api_servers_is_read_from_the_last_start():
    assert api_server_count(["noise", SEVERAL, "(ApiServer_0 pid=1) INFO ..."]) == 2
    assert api_server_count([ONE]) == 1
    assert api_server_count(["no such line"]) is None
    assert api_server_count([SEVERAL, f"{START_MARKER} at 12:00", ONE]) == 1   # the later start


def test_the_report_says_when_the_setting_did_not_take_effect():
    assert "as asked" in api_servers_line("engine", 4, 4)
    warning = api_servers_line("engine 1", 4, 1)
    assert warning.startswith("[engine 1] WARNING: 4 API server(s) asked for") and "ERNIE_API_SERVERS" in warning
    assert "does not say" in api_servers_line("engine", 2, None)


# --- secrets in database URLs -----------------------------------------------------------------

def test_a_postgres_url_is_shown_without_its_password():
    assert without_password("postgresql://bob:s3cret@db:5432/chats") == "postgresql://bob:***@db:5432/chats"
    assert without_password("postgresql://bob@db/chats") == "postgresql://bob@db/chats"
    assert without_password("data/chats.db") == "data/chats.db"


def test_haproxy_never_asks_for_more_connections_than_it_may_open_files():
    assert balancer.max_connections(1_048_576) == 20000
    assert balancer.max_connections(20000) == 9900   # two descriptors a connection, and spare
    assert balancer.max_connections(256) == 100
