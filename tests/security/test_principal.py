"""ssl.principal.mapping.rules (Kafka's syntax) and node identities."""

from __future__ import annotations

import pytest

from kraftlog.errors import ConfigError
from kraftlog.security import principal

DN = "CN=broker-7,OU=Kafka,O=kraftlog,C=DE"


def test_default_rule_keeps_the_full_dn() -> None:
    mapper = principal.PrincipalMapper.from_text()
    assert mapper.principal(DN) == f"User:{DN}"


def test_first_matching_rule_maps_with_groups_and_case() -> None:
    mapper = principal.PrincipalMapper.from_text(
        r"RULE:^CN=(.*?),OU=Ops.*$/ops-$1/, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U, DEFAULT")
    assert mapper.principal(DN) == "User:BROKER-7@KAFKA"
    assert mapper.principal("CN=ann,OU=Ops,O=x") == "User:ops-ann"
    assert mapper.principal("CN=solo") == "User:CN=solo"  # DEFAULT catches the rest


def test_lower_case_and_newline_separated_rules() -> None:
    mapper = principal.PrincipalMapper.from_text("RULE:^CN=([^,]*),.*$/$1/L\nDEFAULT")
    assert mapper.principal("CN=Admin,O=X") == "User:admin"


def test_escaped_slash_and_commas_inside_a_pattern() -> None:
    rules = principal.parse_rules(r"RULE:^CN=(.*?),O=a\/b$/$1\/x/")
    assert len(rules) == 1
    assert principal.PrincipalMapper(rules).principal("CN=n,O=a/b") == "User:n/x"


def test_no_rule_applies_is_no_principal() -> None:
    mapper = principal.PrincipalMapper.from_text(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    assert mapper.principal(DN) is None
    assert mapper.principal("CN=svc,OU=ServiceUsers,O=x") == "User:svc"


@pytest.mark.parametrize("text", ["", "  ", "FOO", "RULE:abc", "RULE:a/b", "RULE:(/x/",
                                  "DEFAULT junk", "RULE:a/b/X"])
def test_bad_rules_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules"):
        principal.parse_rules(text)


def test_node_identity_by_common_name_or_principal() -> None:
    peer = principal.Peer(subject="CN=broker-7,O=kraftlog", common_name="broker-7",
                          principal="User:CN=broker-7,O=kraftlog")
    by_cn = principal.NodePrincipal.parse("CN:broker-{id}", key="k")
    assert by_cn.matches(peer, 7) and not by_cn.matches(peer, 8)
    by_user = principal.NodePrincipal.parse("User:CN=broker-{id},O=kraftlog", key="k")
    assert by_user.matches(peer, 7) and not by_user.matches(peer, 70)
    for bad in ("broker-{id}", "CN:broker", "Group:x-{id}"):
        with pytest.raises(ConfigError, match="k="):
            principal.NodePrincipal.parse(bad, key="k")
