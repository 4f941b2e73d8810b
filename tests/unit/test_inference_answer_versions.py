"""The policy version an answer is labelled with: a server that reports its versions (the
embedded engine) is believed; a vLLM answer, whose server may load new weights while the request
is in flight, is labelled by the version the server had when the request was sent."""

import pytest
from swefleet.inference.fleet_answer import answer_versions
from swefleet.inference.routing import ServerState
from swefleet.inference.wire import CompletionResponse

pytestmark = pytest.mark.unit


def _answer(first: int | None = None, final: int | None = None) -> CompletionResponse:
    return CompletionResponse(choices=[], policy_version=first, policy_version_final=final)


def test_an_answer_straddling_an_update_is_labelled_by_its_send():
    server = ServerState(url="http://vllm", version=4)  # updated 3 -> 4 while in flight
    assert answer_versions(server, _answer(), sent_version=3) == (3, 4)


def test_an_answer_of_one_version_keeps_it():
    server = ServerState(url="http://vllm", version=4)
    assert answer_versions(server, _answer(), sent_version=4) == (4, 4)
    assert answer_versions(server, _answer(), sent_version=None) == (4, 4)  # send unknown


def test_reported_versions_are_believed():
    server = ServerState(url="http://embedded", version=5)
    assert answer_versions(server, _answer(first=3, final=4), sent_version=2) == (3, 4)
    assert answer_versions(server, _answer(first=3), sent_version=2) == (3, 3)
