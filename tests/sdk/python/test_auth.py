"""Authentication and per-user data: the servers run with authentication on (see ../harness.py),
`client` acts as the admin `sdk-admin@test.local` and `other` as the plain user
`sdk-other@test.local`, each through an API key minted with `fawn api-key create`."""

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import AuthenticationError, NotFoundError

from sdkutil import AGENT, answer_text, tag, tool_call, user, without_owner

ADMIN_EMAIL = "sdk-admin@test.local"
OTHER_EMAIL = "sdk-other@test.local"
# the shape of a minted key, but not one
BOGUS_KEY = "fawn_" + "A" * 43


def sdk(server, api_key):
    return get_sync_client(url=server.url, api_key=api_key, timeout=30)


@pytest.fixture
def other(server):
    return sdk(server, server.keys["other"])


@pytest.fixture
def anon(server):
    # (api_key=None: the SDK does not fall back to LANGGRAPH_API_KEY & co.)
    return sdk(server, None)


def me(server, headers) -> dict:
    r = httpx.get(f"{server.url}/api/v1/auth/me", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_anonymous_is_401(anon, server):
    with pytest.raises(AuthenticationError) as e:
        anon.threads.search()
    assert e.value.response.status_code == 401
    assert e.value.response.json()["detail"]
    with pytest.raises(AuthenticationError):
        anon.threads.create()
    with pytest.raises(AuthenticationError):
        anon.store.put_item(["anon"], "k", {"v": 1})
    # on every mount of the API
    for prefix in ("", "/api", "/api/langgraph"):
        r = httpx.post(f"{server.url}{prefix}/threads/search", json={}, timeout=30)
        assert r.status_code == 401, (prefix, r.text)
        assert r.json()["detail"]
    r = httpx.get(f"{server.url}/api/v1/auth/me", timeout=30)
    assert r.status_code == 401 and r.json()["detail"]
    # the health probe stays public
    assert httpx.get(f"{server.url}/ok", timeout=30).status_code == 200


def test_a_wrong_key_is_401(server):
    with pytest.raises(AuthenticationError) as e:
        sdk(server, BOGUS_KEY).threads.search()
    assert e.value.response.json()["detail"]
    for headers in ({"x-api-key": "not-a-key"}, {"Authorization": f"Bearer {BOGUS_KEY}"}):
        r = httpx.post(f"{server.url}/threads/count", json={}, headers=headers, timeout=30)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["detail"]


def test_the_keys_act_for_their_accounts(client, server, monkeypatch):
    admin = me(server, server.headers("admin"))
    assert admin["email"] == ADMIN_EMAIL and admin["system_role"] == "admin" and admin["id"]
    other = me(server, server.headers("other"))
    assert other["email"] == OTHER_EMAIL and other["system_role"] == "user"
    assert other["id"] != admin["id"]
    # `Authorization: Bearer <key>` is the same as `x-api-key`
    assert me(server, {"Authorization": f"Bearer {server.keys['admin']}"}) == admin
    # the SDK: an explicit key, or LANGGRAPH_API_KEY when none is given
    assert isinstance(client.threads.count(), int)
    monkeypatch.setenv("LANGGRAPH_API_KEY", server.keys["other"])
    from_env = get_sync_client(url=server.url, timeout=30)
    th = from_env.threads.create()
    assert th["metadata"]["owner"] == other["id"]


def test_threads_are_per_user(client, other, server):
    admin_id = me(server, server.headers("admin"))["id"]
    other_id = me(server, server.headers("other"))["id"]
    t = tag()
    mine = client.threads.create(metadata={"t": t})
    tid = mine["thread_id"]
    assert mine["metadata"]["owner"] == admin_id, "the server stamps the creator"
    client.runs.wait(tid, AGENT, input=user("the admin's run"))
    (run,) = client.runs.list(tid)

    # another user's thread is a 404 on every route, and never listed
    for call in (
        lambda: other.threads.get(tid),
        lambda: other.threads.update(tid, metadata={"x": 1}),
        lambda: other.threads.get_state(tid),
        lambda: other.threads.get_history(tid),
        lambda: other.threads.update_state(tid, {"messages": []}),
        lambda: other.threads.copy(tid),
        lambda: other.runs.create(tid, AGENT, input=user("not yours")),
        lambda: other.runs.list(tid),
        lambda: other.runs.get(tid, run["run_id"]),
        lambda: other.threads.delete(tid),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert other.threads.search(metadata={"t": t}) == []
    assert other.threads.count(metadata={"t": t}) == 0
    assert tid not in {x["thread_id"] for x in other.threads.search(limit=1000)}
    # naming the owner in the filter does not reach another user's threads
    assert tid not in {x["thread_id"] for x in other.threads.search(metadata={"owner": admin_id},
                                                                     limit=1000)}
    # ... and none of that touched it
    got = client.threads.get(tid)
    assert without_owner(got["metadata"]) == {"t": t, "graph_id": AGENT,
                                               "assistant_id": run["assistant_id"]}
    assert got["metadata"]["owner"] == admin_id
    assert [r["run_id"] for r in client.runs.list(tid)] == [run["run_id"]]

    # the other way round: the admin does not see a plain user's thread either
    theirs = other.threads.create(metadata={"t": t})
    oid = theirs["thread_id"]
    assert theirs["metadata"]["owner"] == other_id
    with pytest.raises(NotFoundError):
        client.threads.get(oid)
    with pytest.raises(NotFoundError):
        client.threads.delete(oid)
    assert [x["thread_id"] for x in client.threads.search(metadata={"t": t})] == [tid]
    assert client.threads.count(metadata={"t": t}) == 1
    assert [x["thread_id"] for x in other.threads.search(metadata={"t": t})] == [oid]
    assert other.threads.count(metadata={"t": t}) == 1
    assert other.threads.get(oid)["thread_id"] == oid


def test_the_owner_cannot_be_forged(client, other, server):
    admin_id = me(server, server.headers("admin"))["id"]
    other_id = me(server, server.headers("other"))["id"]
    t = tag()
    th = other.threads.create(metadata={"t": t, "owner": admin_id})
    tid = th["thread_id"]
    assert th["metadata"]["owner"] == other_id
    other.threads.update(tid, metadata={"owner": admin_id})
    assert other.threads.get(tid)["metadata"]["owner"] == other_id
    with pytest.raises(NotFoundError):
        client.threads.get(tid)
    assert client.threads.search(metadata={"t": t}) == []


def test_a_filter_on_another_users_id_matches_nothing(client, other, server):
    admin_id = me(server, server.headers("admin"))["id"]
    other.threads.create(metadata={"t": tag()})  # the caller has threads of its own
    client.threads.create()
    assert other.threads.search(metadata={"owner": admin_id}) == []
    assert other.threads.count(metadata={"owner": admin_id}) == 0


def test_the_store_is_per_user(client, other):
    ns = ["auth", tag()]
    client.store.put_item(ns, "k", {"who": "admin"})
    assert client.store.get_item(ns, "k")["value"] == {"who": "admin"}
    assert other.store.get_item(ns, "k") is None
    assert other.store.search_items(ns, limit=10)["items"] == []
    assert other.store.list_namespaces(prefix=ns, limit=100)["namespaces"] == []

    other.store.put_item(ns, "k", {"who": "other"})
    assert other.store.get_item(ns, "k")["value"] == {"who": "other"}
    assert client.store.get_item(ns, "k")["value"] == {"who": "admin"}
    assert [it["value"] for it in client.store.search_items(ns, limit=10)["items"]] == [{"who": "admin"}]
    assert [it["value"] for it in other.store.search_items(ns, limit=10)["items"]] == [{"who": "other"}]

    other.store.delete_item(ns, "k")
    assert other.store.get_item(ns, "k") is None
    assert client.store.get_item(ns, "k")["value"] == {"who": "admin"}


def test_a_plain_user_runs_on_their_own_thread(client, other, server):
    other_id = me(server, server.headers("other"))["id"]
    tid = other.threads.create()["thread_id"]
    out = other.runs.wait(tid, AGENT, input=user("hello from the other user"))
    assert "hello from the other user" in answer_text(out)
    parts = list(other.runs.stream(tid, AGENT, input=user(tool_call(after="listed as other")),
                                   stream_mode="values"))
    assert answer_text(parts[-1].data) == "listed as other"
    runs = other.runs.list(tid)
    assert len(runs) == 2 and {r["status"] for r in runs} == {"success"}
    assert other.threads.get(tid)["metadata"]["owner"] == other_id
    with pytest.raises(NotFoundError):
        client.runs.get(tid, runs[0]["run_id"])


def test_admin_only_routes(server):
    anon_r = httpx.post(f"{server.url}/internal/truncate", json={}, timeout=30)
    assert anon_r.status_code == 401
    r = httpx.post(f"{server.url}/internal/truncate", json={}, headers=server.headers("other"), timeout=30)
    assert r.status_code == 403 and r.json()["detail"]
    r = httpx.post(f"{server.url}/api/v1/auth/api-keys", json={"user": OTHER_EMAIL, "name": "mine"},
                   headers=server.headers("other"), timeout=30)
    assert r.status_code == 403 and r.json()["detail"]


def test_admin_mints_and_revokes_a_key(server):
    other_id = me(server, server.headers("other"))["id"]
    with httpx.Client(base_url=server.url, headers=server.headers("admin"), timeout=30) as h:
        r = h.post("/api/v1/auth/api-keys", json={"user": OTHER_EMAIL, "name": "sdk minted"})
        assert r.status_code == 201, r.text
        minted = r.json()
        assert minted["user_id"] == other_id and minted["name"] == "sdk minted"
        assert minted["key"].startswith("fawn_") and minted["key"].startswith(minted["prefix"])
        assert me(server, {"x-api-key": minted["key"]})["email"] == OTHER_EMAIL
        assert isinstance(sdk(server, minted["key"]).threads.count(), int)
        listed = {k["id"]: k for k in h.get("/api/v1/auth/api-keys").json()}
        assert "key" not in listed[minted["id"]], "a key is shown only once"

        r = h.delete(f"/api/v1/auth/api-keys/{minted['id']}")
        assert r.status_code == 200, r.text
        with pytest.raises(AuthenticationError):
            sdk(server, minted["key"]).threads.count()
    # the harness's own key for that user still works
    assert me(server, server.headers("other"))["email"] == OTHER_EMAIL
