"""Tests for mpbroker/config/listeners.py: listener URIs, the security protocol map and
the Advertised address, parsed as Kafka's EndPoint / listener.security.protocol.map are."""
import pytest

from mpbroker.config import ConfigError
from mpbroker.config.listeners import (SECURITY_PROTOCOLS, Advertised, Endpoint, parse_listeners,
                                       parse_protocol_map)
from tests.mpbroker.config.conftest import cfg

PMAP = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "EXTERNAL": "SASL_SSL"}


def test_protocol_map_upper_cases_names_and_protocols_and_trims_blanks():
    assert parse_protocol_map(" plaintext:plaintext , Ssl : ssl,EXTERNAL:SASL_SSL, ") == PMAP
    assert parse_protocol_map("") == {}


def test_protocol_map_splits_on_the_first_colon_only():
    with pytest.raises(ConfigError, match="unknown security protocol SSL:X"):
        parse_protocol_map("A:SSL:X")


@pytest.mark.parametrize("value,reason", [
    ("PLAINTEXT", "Map entry should be of form <key>:<value>"),
    ("A:PLAINTEXT,B", "Map entry should be of form <key>:<value>"),
    ("A:TLS", "unknown security protocol TLS"),
])
def test_protocol_map_errors_name_the_key_and_whole_value(value, reason):
    with pytest.raises(ConfigError) as e:
        parse_protocol_map(value)
    assert str(e.value) == f"Invalid value {value} for configuration listener.security.protocol.map: {reason}"
    assert e.value.name == "listener.security.protocol.map" and e.value.value == value
    assert e.value.error_code == 40


def test_every_kafka_security_protocol_is_accepted():
    value = ",".join(f"L{i}:{p.lower()}" for i, p in enumerate(SECURITY_PROTOCOLS))
    assert sorted(parse_protocol_map(value).values()) == sorted(SECURITY_PROTOCOLS)


def test_listeners_resolve_name_host_port_and_protocol():
    eps = parse_listeners("plaintext://broker1:9092 ,  EXTERNAL://10.0.0.1:19092", PMAP)
    assert eps == [Endpoint("PLAINTEXT", "broker1", 9092, "PLAINTEXT"),
                   Endpoint("EXTERNAL", "10.0.0.1", 19092, "SASL_SSL")]
    assert isinstance(eps[0].port, int)


def test_listener_with_empty_host_binds_default_interface_and_port_zero_is_allowed():
    assert parse_listeners("SSL://:0", PMAP) == [Endpoint("SSL", "", 0, "SSL")]


def test_bracketed_ipv6_host_loses_its_brackets():
    assert parse_listeners("PLAINTEXT://[::1]:9092", PMAP)[0].host == "::1"
    assert parse_listeners("PLAINTEXT://[fe80::1%eth0]:1", PMAP)[0].host == "fe80::1%eth0"


@pytest.mark.parametrize("value", ["", "  ", None, " , ,"])
def test_empty_listener_lists_parse_to_nothing(value):
    assert parse_listeners(value, PMAP) == []


@pytest.mark.parametrize("item", ["PLAINTEXT://host", "PLAINTEXT:host:9092", "PLAINTEXT://h:port",
                                  "PLAINTEXT://h o:1"])
def test_unparseable_endpoint_is_named(item):
    with pytest.raises(ConfigError, match=f"^Unable to parse {item} to a broker endpoint$"):
        parse_listeners(f"SSL://:1,{item}", PMAP)


def test_listener_name_must_be_in_the_protocol_map():
    with pytest.raises(ConfigError, match="^No security protocol defined for listener FOO$"):
        parse_listeners("foo://:9092", PMAP)


@pytest.mark.parametrize("port", [65536, -1])
def test_out_of_range_port_names_the_config_being_parsed(port):
    value = f"PLAINTEXT://h:{port}"
    with pytest.raises(ConfigError) as e:
        parse_listeners(value, PMAP, "advertised.listeners")
    assert str(e.value) == f"Invalid value {value} for configuration advertised.listeners: port {port} out of range"
    assert e.value.name == "advertised.listeners"
    assert parse_listeners("PLAINTEXT://h:65535", PMAP)[0].port == 65535


def test_listener_names_must_be_unique_case_insensitively():
    value = "PLAINTEXT://a:1,plaintext://b:2"
    with pytest.raises(ConfigError, match="^Each listener must have a different name, listeners: "):
        parse_listeners(value, PMAP)
    with pytest.raises(ConfigError, match="different name, advertised.listeners: PLAINTEXT://a:1,plaintext"):
        parse_listeners(value, PMAP, "advertised.listeners")


def test_advertised_listeners_default_to_listeners_and_otherwise_use_their_own_map_lookup():
    c = cfg(listeners="PLAINTEXT://127.0.0.1:9092")
    assert c.advertised_listeners == c.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    c = cfg(**{"listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
               "advertised.listeners": "internal://host.example:19093",
               "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL"})
    assert c.advertised_listeners == [Endpoint("INTERNAL", "host.example", 19093, "SSL")]


def test_advertised_is_a_host_port_pair_carrying_its_endpoints():
    eps = [("PLAINTEXT", "h", 9092, "PLAINTEXT"), ("SSL", "h", 9093, "SSL")]
    a = Advertised("h", 9092, iter(eps))
    assert a == ("h", 9092) and tuple(a) == ("h", 9092)
    host, port = a
    assert (host, port) == ("h", 9092)
    assert a.endpoints == tuple(eps)
    assert Advertised("h", 1).endpoints == ()
