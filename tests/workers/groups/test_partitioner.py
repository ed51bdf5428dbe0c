from workers.groups.partitioner import coordinator_partition, java_string_hash, kafka_abs


def test_java_string_hash_known_values():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112


def test_hash_wraps_to_int32():
    # the well-known String whose hashCode is Integer.MIN_VALUE
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    h = java_string_hash("consumer-group-with-a-long-name-0123456789")
    assert -(1 << 31) <= h < (1 << 31)


def test_hash_is_over_utf16_code_units():
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert java_string_hash("é") == 0xE9


def test_kafka_abs_maps_min_value_to_zero():
    assert kafka_abs(-(1 << 31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_coordinator_partition():
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    # a negative hash: Kafka's abs, then modulo (not Python's modulo of a negative number)
    s = next(f"group-{i}" for i in range(10000) if java_string_hash(f"group-{i}") < 0)
    h = java_string_hash(s)
    assert coordinator_partition(s, 50) == (-h) % 50
    assert all(0 <= coordinator_partition(f"group-{i}", 7) < 7 for i in range(200))
