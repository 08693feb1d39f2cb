"""Firmware codec (satellite.wire, on CPython) against google-protobuf (upb), byte for byte.

Messages come from hypothesis strategies derived generically from the pb2 descriptors and the
alabama.options bounds, for every Envelope arm: pb2 bytes -> firmware decode -> re-encode must be
identical, the decoded values must equal pb2's, and a firmware object built from pb2 values must
encode to pb2's bytes.
"""
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD
from hypothesis import HealthCheck, given, settings, strategies as st

from alabama.conformance.corpus import INT_RANGE, Bounds, envelope_arms, mismatch, to_firmware
from alabama.v1 import envelope_pb2
from satellite.wire import alabama_v1 as v1, pb

BOUNDS = Bounds()
ARMS = envelope_arms(envelope_pb2.Envelope)


def scalar_strategy(f, bounds):
    t = f.type
    if t == FD.TYPE_BOOL:
        return st.booleans()
    if t == FD.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in f.enum_type.values]),
                         st.integers(-2 ** 31, 2 ** 31 - 1))
    if t in INT_RANGE:
        return st.integers(*INT_RANGE[t])
    bound = bounds.size(f)
    if t == FD.TYPE_BYTES:
        return st.one_of(st.binary(max_size=min(bound, 64)), st.binary(min_size=bound, max_size=bound))
    fits = st.text(max_size=min(bound, 40)).filter(lambda s: len(s.encode()) <= bound)
    return st.one_of(fits, st.text(alphabet="aé", min_size=bound // 2, max_size=bound).filter(
        lambda s: len(s.encode()) <= bound), st.just("z" * bound))


def field_strategy(f, bounds, memo):
    if f.type == FD.TYPE_MESSAGE:
        elem = message_strategy(f.message_type, bounds, memo)
    else:
        elem = scalar_strategy(f, bounds)
    if f.is_repeated:
        n = bounds.count(f)
        return st.one_of(st.lists(elem, max_size=min(n, 3)), st.lists(elem, min_size=n, max_size=n)) \
            if f.type != FD.TYPE_MESSAGE or n <= 4 else st.lists(elem, max_size=min(n, 3))
    return elem


def message_strategy(desc, bounds, memo):
    """pb2 instances of ``desc``: any subset of plain fields, at most one arm per oneof."""
    if desc.full_name in memo:
        return memo[desc.full_name]
    cls = _pb2_class(desc)
    plain = {f.name: field_strategy(f, bounds, memo) for f in desc.fields if f.containing_oneof is None}
    oneofs = []
    for o in desc.oneofs:
        arms = [st.tuples(st.just(f.name), field_strategy(f, bounds, memo)) for f in o.fields]
        oneofs.append(st.one_of(st.none(), *arms))

    def build(args):
        values, arms = args
        m = cls()
        for name, v in values.items():
            _assign(m, desc.fields_by_name[name], v)
        for arm in arms:
            if arm is not None:
                _assign(m, desc.fields_by_name[arm[0]], v=arm[1])
        return m

    s = st.tuples(st.fixed_dictionaries({}, optional=plain), st.tuples(*oneofs)).map(build)
    memo[desc.full_name] = s
    return s


def _assign(m, f, v):
    if f.is_repeated:
        if f.type == FD.TYPE_MESSAGE:
            for x in v:
                getattr(m, f.name).add().CopyFrom(x)
        else:
            getattr(m, f.name).extend(v)
    elif f.type == FD.TYPE_MESSAGE:
        getattr(m, f.name).CopyFrom(v)
    else:
        setattr(m, f.name, v)


def _pb2_class(desc):
    from google.protobuf import message_factory
    return message_factory.GetMessageClass(desc)


def envelope_strategy(arm, bounds=BOUNDS, root=envelope_pb2.Envelope):
    desc = root.DESCRIPTOR
    memo = {}
    arm_f = desc.fields_by_name[arm]
    plain = {f.name: field_strategy(f, bounds, memo) for f in desc.fields if f.containing_oneof is None}

    def build(args):
        values, v = args
        env = root()
        for name, x in values.items():
            _assign(env, desc.fields_by_name[name], x)
        _assign(env, arm_f, v)
        return env

    return st.tuples(st.fixed_dictionaries({}, optional=plain), field_strategy(arm_f, bounds, memo)).map(build)


def check_roundtrip(env, module=v1, cls=None):
    raw = env.SerializeToString()
    cls = cls or module.Envelope
    fw = pb.decode(cls, raw)
    why = mismatch(fw, env)
    assert why is None, why
    assert pb.encode(fw) == raw
    assert pb.size(fw) == len(raw)
    built = to_firmware(env, module)
    assert pb.encode(built) == raw
    # decode_into a reused instance holding a different operation gives the same result
    reused = cls(id=9, ping=module.Ping(t1=5)) if hasattr(module, "Ping") else cls()
    pb.decode_into(reused, raw)
    assert reused == fw, (reused, fw)
    buf = bytearray(len(raw) + 3)
    assert pb.encode_into(fw, buf, 3) == len(buf)
    assert bytes(buf[3:]) == raw


@pytest.mark.parametrize("arm", ARMS)
def test_r2_2_a_every_envelope_arm_roundtrips_byte_identical(arm):
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(envelope_strategy(arm))
    def run(env):
        assert env.WhichOneof("op") == arm
        check_roundtrip(env)

    run()


def test_every_arm_is_covered():
    assert len(ARMS) == len(envelope_pb2.Envelope.DESCRIPTOR.oneofs[0].fields) >= 29
    assert set(ARMS) == {f[1] for f in v1.Envelope._F if f[5] == "op"}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_provisioning_record_roundtrips(data):
    from alabama.v1 import provisioning_pb2
    desc = provisioning_pb2.ProvisioningRecord.DESCRIPTOR
    rec = data.draw(message_strategy(desc, BOUNDS, {}))
    raw = rec.SerializeToString()
    fw = pb.decode(v1.ProvisioningRecord, raw)
    assert mismatch(fw, rec) is None
    assert pb.encode(fw) == raw


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=64))
def test_random_bytes_decode_like_upb_or_refuse_typed(raw):
    """Arbitrary input: the firmware codec either refuses it with a DecodeError or agrees with upb."""
    try:
        fw = pb.decode(v1.Envelope, raw)
    except pb.DecodeError as e:
        assert e.code != pb.INTERNAL, e
        return
    ref = envelope_pb2.Envelope()
    ref.ParseFromString(raw)  # anything we accept, upb accepts
    if fw.unknown_op == 0:
        ref.DiscardUnknownFields()
        assert pb.encode(fw) == ref.SerializeToString()
