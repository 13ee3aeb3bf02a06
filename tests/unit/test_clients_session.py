"""Sessions share one botocore loader: service models are read once per process."""

from __future__ import annotations

from dependency_tracker.core import clients


def test_sessions_share_the_loader_and_keep_their_own_credentials():
    first = clients.session()
    second = clients.session()
    assert first is not second
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    first._session.set_credentials("one", "secret-one")
    theirs = second._session.get_credentials()
    assert theirs is None or theirs.access_key != "one"


def test_a_second_client_of_a_service_reads_no_model_file_again(monkeypatch):
    clients.session().client("sqs", region_name="us-east-1")
    loader = clients.session()._session.get_component("data_loader")
    reads: list[str] = []
    original = loader.file_loader.load_file

    def counted(path: str) -> object:
        reads.append(path)
        return original(path)

    monkeypatch.setattr(loader.file_loader, "load_file", counted)
    clients.session().client("sqs", region_name="us-east-1")
    assert reads == []


def test_new_clients_use_the_shared_loader():
    sqs = clients.new_client("sqs", region="us-east-1")
    loader = clients.session()._session.get_component("data_loader")
    assert sqs.meta.service_model.service_name == "sqs"
    assert loader.load_service_model("sqs", "service-2") is not None
