"""The long-term store: put/get/search/delete/list namespaces."""

import pytest
from langgraph_sdk.errors import UnprocessableEntityError

from sdkutil import tag


def test_put_get_update_delete(client):
    ns = ["sdk", tag(), "prefs"]
    assert client.store.get_item(ns, "theme") is None, "a miss is null"
    client.store.put_item(ns, "theme", {"mode": "dark"})
    item = client.store.get_item(ns, "theme")
    assert item["namespace"] == ns and item["key"] == "theme"
    assert item["value"] == {"mode": "dark"}
    assert item["created_at"] and item["updated_at"]
    client.store.put_item(ns, "theme", {"mode": "light", "contrast": 2})
    again = client.store.get_item(ns, "theme")
    assert again["value"] == {"mode": "light", "contrast": 2}
    assert again["created_at"] == item["created_at"] and again["updated_at"] >= item["updated_at"]
    client.store.delete_item(ns, "theme")
    assert client.store.get_item(ns, "theme") is None


def test_search_filter_and_pagination(client):
    root = ["sdk", tag()]
    for i in range(5):
        client.store.put_item(root + ["docs"], f"k{i}", {"n": i, "even": i % 2 == 0})
    client.store.put_item(root + ["other"], "x", {"n": 99, "even": False})
    res = client.store.search_items(root, limit=10)
    assert set(res) == {"items"}
    assert len(res["items"]) == 6
    assert all("score" in it for it in res["items"])
    docs = client.store.search_items(root + ["docs"], limit=10)["items"]
    assert sorted(it["key"] for it in docs) == [f"k{i}" for i in range(5)]
    even = client.store.search_items(root, filter={"even": True}, limit=10)["items"]
    assert sorted(it["value"]["n"] for it in even) == [0, 2, 4]
    p1 = client.store.search_items(root + ["docs"], limit=2)["items"]
    p2 = client.store.search_items(root + ["docs"], limit=2, offset=2)["items"]
    p3 = client.store.search_items(root + ["docs"], limit=2, offset=4)["items"]
    keys = [it["key"] for it in p1 + p2 + p3]
    assert sorted(keys) == [f"k{i}" for i in range(5)] and len(set(keys)) == 5
    # a query without a semantic index behaves like no query
    q = client.store.search_items(root + ["docs"], query="anything", limit=10)["items"]
    assert len(q) == 5


def test_list_namespaces(client):
    t = tag()
    for ns in (["sdkns", t, "a", "x"], ["sdkns", t, "b"], ["sdkns", t, "a", "y"]):
        client.store.put_item(ns, "k", {"v": 1})
    res = client.store.list_namespaces(prefix=["sdkns", t], limit=100)
    assert sorted(map(tuple, res["namespaces"])) == [
        ("sdkns", t, "a", "x"), ("sdkns", t, "a", "y"), ("sdkns", t, "b"),
    ]
    depth = client.store.list_namespaces(prefix=["sdkns", t], max_depth=3, limit=100)
    assert sorted(map(tuple, depth["namespaces"])) == [("sdkns", t, "a"), ("sdkns", t, "b")]
    suffix = client.store.list_namespaces(prefix=["sdkns", t], suffix=["y"], limit=100)
    assert [tuple(n) for n in suffix["namespaces"]] == [("sdkns", t, "a", "y")]
    page = client.store.list_namespaces(prefix=["sdkns", t], limit=1, offset=1)
    assert len(page["namespaces"]) == 1


def test_bad_store_input(client, http):
    with pytest.raises(ValueError):
        client.store.put_item(["bad.label"], "k", {"v": 1})  # the SDK pre-validates
    r = http.put("/store/items", json={"namespace": ["a.b"], "key": "k", "value": {}})
    assert r.status_code == 422 and "detail" in r.json()
    r = http.put("/store/items", json={"namespace": ["a"], "key": "k", "value": [1, 2]})
    assert r.status_code == 422 and "detail" in r.json()
    with pytest.raises(UnprocessableEntityError):
        client.store.put_item(["ok"], "k", "not an object")
