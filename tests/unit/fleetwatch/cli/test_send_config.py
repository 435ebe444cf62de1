"""``fleetwatch send --config fleetwatch.yaml`` (the operator's config, where the agent's is
meant): one line saying whose config that is and which one ``send`` reads, not "state_url:
unknown setting" (issue 31, item 20). Nothing connects: the config is refused first."""

from __future__ import annotations

from fleetwatch import cli


def test_the_operator_config_given_to_send_is_named_as_such(tmp_path, capsys):
    operator = tmp_path / "fleetwatch.yaml"
    operator.write_text("routers: [tcp://127.0.0.1:5556]\nstate_url: sqlite:////x/state.db\n")
    assert cli.main(["send", "notify", "--config", str(operator), "disk full"]) == 78
    err = capsys.readouterr().err.splitlines()
    assert err == [f"fleetwatch send: {operator}: this is an operator config (fleetwatch.yaml: "
                   f"status, alerts, the console); `send` reads the agent's config, for its "
                   f"intake endpoint: --config /etc/fleetwatch/agent.yaml (the agent's "
                   f"--config), or --endpoint"], err


def test_an_agent_config_with_a_typo_still_names_the_key(tmp_path, capsys):
    agent = tmp_path / "agent.yaml"
    agent.write_text("routers: [tcp://127.0.0.1:5555]\nheartbeat_intervall: 5\n")
    assert cli.main(["send", "notify", "--config", str(agent), "disk full"]) == 78
    err = capsys.readouterr().err
    assert "heartbeat_intervall: unknown setting" in err and "operator" not in err
