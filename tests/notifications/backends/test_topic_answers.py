"""How the v1 topic client reads FCM's answers, one registration at a time (pure policy, httpx.MockTransport)."""

import httpx
import pytest

from notifications.backends.fcm_topics import V1TopicClient
from notifications.backends.iid import IIDRefused, IIDTemporary

TOKEN = "live-" + "a" * 20


class Token:
    def get(self, *, refused=None):
        return "fresh" if refused else "stale"


def client(answer):
    seen = []

    def handler(request):
        seen.append(request)
        return answer(request)

    made = V1TopicClient(credentials=Token(), project_id="p", base_url="https://fcm.test",
                         transport=httpx.MockTransport(handler))  # fmt: skip
    return made, seen


def google(status, rpc, message="", code=None):
    error = {"code": status, "status": rpc, "message": message}
    if code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    return httpx.Response(status, json={"error": error})


@pytest.mark.parametrize(
    ("answer", "wish", "code"),
    [
        (httpx.Response(200, json={"topic_name": "news"}), True, ""),
        (google(409, "ALREADY_EXISTS", "Requested entity already exists"), True, ""),
        (httpx.Response(200, json={}), False, ""),
        (google(404, "NOT_FOUND", "Topic subscription not found."), False, ""),
        (google(404, "NOT_FOUND", "Requested entity was not found.", code="UNREGISTERED"), False, "NOT_FOUND"),
        (google(404, "NOT_FOUND", "Requested registration was not found."), True, "NOT_FOUND"),
        (google(400, "INVALID_ARGUMENT", "The registration token is not valid"), True, "INVALID_ARGUMENT"),
    ],
)
def test_answer__one_code_per_registration(answer, wish, code):
    made, seen = client(lambda request: answer)

    assert made.apply("news", {TOKEN: wish}) == {TOKEN: code}
    (request,) = seen
    if wish:
        assert request.method == "POST" and request.url.params["topic_name"] == "news" and request.content == b"{}"
        assert request.url.path == f"/v1/projects/p/registrations/{TOKEN}/topicSubscriptions"
    else:
        assert request.method == "DELETE" and request.url.params["allowMissing"] == "true"
        assert request.url.path == f"/v1/projects/p/registrations/{TOKEN}/topicSubscriptions/news"


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (httpx.Response(503, headers={"retry-after": "30"}, json={}), IIDTemporary, "Retry-After 30 s"),
        (httpx.Response(429, json={}), IIDTemporary, "HTTP 429"),
        (google(403, "PERMISSION_DENIED", "Permission denied"), IIDRefused, "refused the service account"),
        (httpx.Response(404, text="<html>no such page</html>"), IIDRefused, "HTTP 404"),
        (google(400, "INVALID_ARGUMENT", "Invalid topic name"), IIDRefused, "HTTP 400"),
        (httpx.Response(302, headers={"location": "https://elsewhere"}), IIDRefused, "HTTP 302"),
    ],
)
def test_answer__what_stands_for_the_whole_job_raises(answer, error, words):
    made, _ = client(lambda request: answer)

    with pytest.raises(error, match=words):
        made.apply("news", {TOKEN: True})


def test_answer__a_401_replaces_the_token_once():
    made, seen = client(
        lambda request: httpx.Response(401, json={}) if "stale" in request.headers["authorization"] else
        httpx.Response(200, json={})
    )  # fmt: skip

    assert made.apply("news", {TOKEN: True}) == {TOKEN: ""}
    assert [r.headers["authorization"] for r in seen] == ["Bearer stale", "Bearer fresh"]


def test_list__pages_are_followed_and_names_read_from_either_spelling():
    pages = {
        "": {"topic_subscriptions": [{"topic_name": "b"}], "next_page_token": "t1"},
        "t1": {"topicSubscriptions": [{"name": "projects/p/registrations/x/topicSubscriptions/a"}]},
    }
    made, seen = client(lambda request: httpx.Response(200, json=pages[request.url.params.get("pageToken", "")]))

    assert made.topics(TOKEN) == ["a", "b"]
    assert [r.url.params.get("pageToken") for r in seen] == [None, "t1"]
    assert seen[0].url.params["pageSize"] == "1000"
