"""roles/secrets.py without a host: its decisions from the DeployState fact's fixtures, and the commands its
operation yields for a fake host's facts (tests/fakehost.py)."""

import hashlib

import pytest
from pyinfra.facts.files import File, Sha256File

from fakehost import fixture_fact, run_role
from roles import secrets

# the text whose sha256 the fixture DeployState/redeploy_everything_in_place found on the host
SECRETS = "api_key: sk-fixture-0123456789abcdef\n"
PATH = "/etc/sglang-deploy/sglang/secrets.yaml"
CONFIG_DIR = "/etc/sglang-deploy/sglang"


def found(case: str) -> dict:
    return fixture_fact("DeployState", case)["files"]


def test_in_place_after_a_deploy():
    assert secrets.in_place(found("redeploy_everything_in_place"), SECRETS, "sglang", "sglang")


def test_first_deploy_is_not_in_place_and_its_content_changes():
    files = found("first_deploy_gpu_host")
    assert not secrets.in_place(files, SECRETS, "sglang", "sglang")
    assert secrets.found_hash(files, "sglang") is None
    assert secrets.content_changed(secrets.found_hash(files, "sglang"), SECRETS)


def test_a_new_key_is_a_content_change():
    files = found("redeploy_everything_in_place")
    assert not secrets.in_place(files, "api_key: sk-rotated\n", "sglang", "sglang")
    assert secrets.content_changed(secrets.found_hash(files, "sglang"), "api_key: sk-rotated\n")


@pytest.mark.parametrize("path, entry", [
    (PATH, ["644", "root", "sglang"]),  # world-readable: repaired
    (PATH, ["640", "sglang", "sglang"]),  # owned by the service user: repaired
    (PATH, ["640", "root", "root"]),  # the service cannot read it
    (CONFIG_DIR, ["755", "root", "sglang"]),
    (CONFIG_DIR, ["750", "root", "root"]),
])
def test_a_mode_or_owner_repair_is_not_in_place_but_needs_no_restart(path, entry):
    files = found("redeploy_everything_in_place")
    files[path] = entry + files[path][3:]
    assert not secrets.in_place(files, SECRETS, "sglang", "sglang")
    assert not secrets.content_changed(secrets.found_hash(files, "sglang"), SECRETS)


def test_another_service_user_is_not_in_place():
    assert not secrets.in_place(found("redeploy_everything_in_place"), SECRETS, "sglang", "other")


def test_found_hash_needs_the_fourth_field():
    assert secrets.found_hash({PATH: ["640", "root", "sglang"]}, "sglang") is None  # stat, but sha256sum failed
    assert secrets.found_hash(found("redeploy_everything_in_place"), "sglang") == hashlib.sha256(SECRETS.encode()).hexdigest()
    assert secrets.found_hash(found("redeploy_everything_in_place"), "other") is None


# --- the operation: facts in, commands out ---------------------------------------------------------------

def test_a_new_secrets_file_is_0600_before_a_byte_arrives_then_0640_root_group():
    ops = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang")
    assert ops.named("Config directory").commands == [
        f"mkdir -p {CONFIG_DIR}", f"chmod 750 {CONFIG_DIR}", f"chown root:sglang {CONFIG_DIR}"]
    assert ops.named("Secrets").commands == [
        f"install -m 600 /dev/null {PATH}", f"upload {PATH}", f"chown root:sglang {PATH}", f"chmod 640 {PATH}"]
    assert "sk-fixture" not in "\n".join(ops.commands + ops.names)
    # decided by the sha256 of the file: no fact reads its content (pyinfra -vvv prints facts' output)
    assert {name for name, _ in ops.asked} == {"Directory", "Sha256File"}


def test_an_unchanged_secrets_file_is_not_sent_again_and_a_wrong_mode_is_repaired():
    digest = hashlib.sha256(SECRETS.encode()).hexdigest()
    ok = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang",
                  facts={Sha256File: digest, File: {"mode": 640, "user": "root", "group": "sglang"},
                         "Directory": {"mode": 750, "user": "root", "group": "sglang"}})
    assert ok.commands == []
    loose = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang",
                     facts={Sha256File: digest, File: {"mode": 644, "user": "root", "group": "root"},
                            "Directory": {"mode": 750, "user": "root", "group": "sglang"}})
    assert loose.named("Secrets").commands == [f"chmod 640 {PATH}", f"chown root:sglang {PATH}"]


def test_under_sudo_the_secret_is_staged_in_the_ssh_users_0700_directory_never_in_tmp():
    ops = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang",
                   data={"_sudo": True}, facts={"Home": "/home/deploy"})
    staging = "/home/deploy/.sglang-deploy-staging"
    staged = f"{staging}/{hashlib.sha256(PATH.encode()).hexdigest()[:16]}"
    assert ops.named("Secrets").commands == [
        f"umask 077 && mkdir -p {staging} && chmod 700 {staging}", f"upload {staged}",
        f"install -m 600 {staged} {PATH}", f"rm -f {staged}", f"chown root:sglang {PATH}", f"chmod 640 {PATH}"]
    assert "/tmp" not in "\n".join(ops.commands)
