"""roles/secrets.py without a host: its decisions from the DeployState fact's fixtures and the host's digest of the
file (render.secrets_digest, the admin key's value left out), and the commands its operation yields for a fake
host's facts (tests/fakehost.py)."""

import hashlib
import subprocess

import pytest
from pyinfra.facts.files import File

from fakehost import fixture_fact, run_role
from roles import secrets
from roles.facts import SecretsDigest
from sglang_deploy.render import secrets_digest, secrets_digest_command

SECRETS = 'api-key: "sk-fixture-0123456789abcdef"\nadmin-api-key: "sgladm-one"\n'
SAME_BUT_ADMIN = 'api-key: "sk-fixture-0123456789abcdef"\nadmin-api-key: "sgladm-two"\n'
PATH = "/etc/sglang-deploy/sglang/secrets.yaml"
CONFIG_DIR = "/etc/sglang-deploy/sglang"


def found(case: str) -> dict:
    return fixture_fact("DeployState", case)["files"]


def test_in_place_after_a_deploy_whatever_admin_key_the_host_keeps():
    assert secrets.in_place(found("redeploy_everything_in_place"), SECRETS, "sglang", "sglang",
                            secrets_digest(SAME_BUT_ADMIN))
    assert not secrets.content_changed(secrets_digest(SAME_BUT_ADMIN), SECRETS)


def test_first_deploy_is_not_in_place_and_its_content_changes():
    files = found("first_deploy_gpu_host")
    assert not secrets.in_place(files, SECRETS, "sglang", "sglang", None)
    assert secrets.content_changed(None, SECRETS)


def test_a_new_key_is_a_content_change():
    files = found("redeploy_everything_in_place")
    rotated = SECRETS.replace("sk-fixture", "sk-rotated")
    assert not secrets.in_place(files, rotated, "sglang", "sglang", secrets_digest(SECRETS))
    assert secrets.content_changed(secrets_digest(SECRETS), rotated)


def test_a_file_without_an_admin_key_is_a_content_change():
    # a host deployed before the tool owned an admin key: rewritten (and the server restarted) once
    old = 'api-key: "sk-fixture-0123456789abcdef"\n'
    assert secrets.content_changed(secrets_digest(old), SECRETS)
    assert secrets_digest(old) != secrets_digest(SECRETS)


def test_an_admin_key_sglang_would_read_as_an_option_is_rewritten():
    """SGLang merges the --config file into argv (`--admin-api-key <key>`): a key starting with '-' (token_urlsafe's,
    one in 64) stopped its start in CI ("argument --admin-api-key: expected one argument"). The tool's keys carry a
    prefix; a host's key without it counts as none, so the file is rewritten and the server restarted once."""
    import secrets as random_keys

    from sglang_deploy.render import ADMIN_KEY_PREFIX

    dashed = 'api-key: "sk-fixture-0123456789abcdef"\nadmin-api-key: "-Zx3"\n'
    assert secrets.content_changed(secrets_digest(dashed), SECRETS)
    assert not secrets.content_changed(secrets_digest(SAME_BUT_ADMIN), SECRETS)
    assert not any((ADMIN_KEY_PREFIX + random_keys.token_urlsafe(32)).startswith("-") for _ in range(1000))


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
    assert not secrets.in_place(files, SECRETS, "sglang", "sglang", secrets_digest(SECRETS))
    assert not secrets.content_changed(secrets_digest(SECRETS), SECRETS)


def test_another_service_user_is_not_in_place():
    assert not secrets.in_place(found("redeploy_everything_in_place"), SECRETS, "sglang", "other",
                                secrets_digest(SECRETS))


@pytest.mark.parametrize("text", [SECRETS, SAME_BUT_ADMIN, 'api-key: "k"\n', "# only a comment\n",
                                  'api-key: "k"\nadmin-api-key: "a"', 'api-key: "k"\n\n'])
def test_the_hosts_digest_is_the_controllers(tmp_path, text):
    # the host's grep | sha256sum (render.secrets_digest_command) and the controller's function agree, byte for byte
    path = tmp_path / "secrets.yaml"
    path.write_text(text)
    host = subprocess.run(["sh", "-c", secrets_digest_command(str(path))], capture_output=True, text=True)
    assert host.stdout.strip() == secrets_digest(text)
    assert "sgladm-one" not in secrets_digest_command(str(path)) + host.stdout
    missing = subprocess.run(["sh", "-c", secrets_digest_command(str(tmp_path / "absent"))], capture_output=True,
                             text=True)
    assert SecretsDigest().process(missing.stdout.splitlines()) is None


# --- the operation: facts in, commands out ---------------------------------------------------------------

def test_a_new_secrets_file_is_0600_before_a_byte_arrives_then_0640_root_group():
    ops = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang")
    assert ops.named("Config directory").commands == [
        f"mkdir -p {CONFIG_DIR}", f"chmod 750 {CONFIG_DIR}", f"chown root:sglang {CONFIG_DIR}"]
    assert ops.named("Secrets").commands == [
        f"install -m 600 /dev/null {PATH}", f"upload {PATH}", f"chown root:sglang {PATH}", f"chmod 640 {PATH}"]
    assert "sk-fixture" not in "\n".join(ops.commands + ops.names)
    assert "sgladm-one" not in "\n".join(ops.commands + ops.names)
    # decided by the host's digest of the file: no fact reads its content (pyinfra -vvv prints facts' output)
    assert {name for name, _ in ops.asked} == {"Directory", "SecretsDigest"}


def test_an_unchanged_secrets_file_is_not_sent_again_and_a_wrong_mode_is_repaired():
    digest = secrets_digest(SAME_BUT_ADMIN)  # the host's admin key is another: it stays
    ok = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang",
                  facts={SecretsDigest: digest, File: {"mode": 640, "user": "root", "group": "sglang"},
                         "Directory": {"mode": 750, "user": "root", "group": "sglang"}})
    assert ok.commands == []
    loose = run_role(secrets.configure_secrets, secrets=SECRETS, service="sglang", user="sglang",
                     facts={SecretsDigest: digest, File: {"mode": 644, "user": "root", "group": "root"},
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
