"""Release-signed OTA end to end (issue 29, docs/ota.md "Release signature"): a virtual board whose provisioning
record pins a release key takes an update only with a valid signature by that key (manifest.json.sig beside the
manifest, alabama.board.signing), and refuses a missing or bad one before anything is written: the old firmware
keeps running. Without a pinned key (test_ota_e2e.py) the board never asks for a signature (channel trust)."""
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from alabama.board import logwords as lw
from alabama.board import ota, signing
from alabama.core.errors import RequestFailed
from alabama.provision import record as rc

from test_ota_e2e import RUNNING, info, lib_digest, march, new_firmware, offer, wait_info
from vb_support import board, device_id

pytestmark = pytest.mark.needs_micropython


def _raw(key):
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def pinned_board(tmp_path, core, release_pub):
    """A board provisioned (record written into its flash, as QR/sound/serial deliver it) with a release key."""
    token, _ = core.run(core.core.mint_token, 600)
    vb = board(tmp_path, core, token=token)
    path = vb.flash / rc.DATA_DIR / rc.RECORD
    rec = rc.decode(path.read_bytes())
    rec.release_key = release_pub
    path.write_bytes(rc.encode(rec))
    vb.start()
    vb.wait_log(lw.PAIRED, 30)
    return vb


def test_pinned_release_key_and_good_signature_update_applies(core, tmp_path):
    key = Ed25519PrivateKey.generate()
    vb = pinned_board(tmp_path, core, _raw(key))
    try:
        dev = device_id(vb)
        # pairing used the token and re-stored the record: the release key stays pinned
        assert rc.decode((vb.flash / rc.DATA_DIR / rc.RECORD).read_bytes()).release_key == _raw(key)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.3.0-signed"), out=lambda *a: None)
        fw.sig = signing.sign_manifest(key, fw.manifest)
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            res = json.loads(offer(core, dev, srv, fw).content[0].text)
            assert res["staged"] == "0.3.0-signed"
            after = wait_info(core, dev, lambda i: i["firmware"] == "0.3.0-signed" and i["ota"]["state"] != "trial")
        assert srv.requests[:2] == ["manifest.json", "manifest.json.sig"]
        assert after["firmware_digest"] == fw.digest and after["ota"]["state"] == "ok"
        vb.wait_log(r"manifest signature verified with the pinned release key %s" % _raw(key)[:4].hex(), 5)
    finally:
        vb.stop()
    assert core.violations() == []


def test_pinned_release_key_refuses_missing_or_bad_signature_before_any_write(core, tmp_path):
    key = Ed25519PrivateKey.generate()
    vb = pinned_board(tmp_path, core, _raw(key))
    try:
        dev = device_id(vb)
        before = lib_digest(vb.flash)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.3.1-unsigned"), out=lambda *a: None)
        other = new_firmware(tmp_path, "0.3.2-other")
        fw_other = ota.build_set(march(vb), other, out=lambda *a: None)
        cases = [
            ("UNSIGNED", None, None),                                                  # no .sig: HTTP 404
            ("BAD_SIGNATURE", signing.sign_manifest(Ed25519PrivateKey.generate(), fw.manifest), None),  # wrong key
            ("BAD_SIGNATURE", signing.sign_manifest(key, fw_other.manifest), None),   # the key's, another manifest
            ("BAD_SIGNATURE", key.sign(fw.manifest), None),                           # the manifest, no CONTEXT
            ("BAD_SIGNATURE", signing.sign_manifest(key, fw.manifest),                # cut to 63 bytes
             lambda path, body: (len(body) - 1, body[:-1]) if path.endswith(".sig") else (len(body), body)),
            ("BAD_SIGNATURE", signing.sign_manifest(key, fw.manifest) + b"\0",  None),  # 65 bytes: over the limit
        ]
        for reason, sig, fault in cases:
            fw.sig = sig
            m = vb.mark()
            with ota.SetServer(fw, bind="127.0.0.1", fault=fault) as srv:
                with pytest.raises(RequestFailed) as e:
                    offer(core, dev, srv, fw)
            assert e.value.code == "INVALID_REQUEST", reason
            vb.wait_log(lw.ota_refused(reason), 5, m)
            # nothing but the manifest and its signature was fetched; nothing staged, lib/ unchanged
            assert srv.requests == ["manifest.json", "manifest.json.sig"], (reason, srv.requests)
            assert lib_digest(vb.flash) == before and not (vb.flash / "ota" / "stage").exists()
        assert "release key" in e.value.error_message or "signature" in e.value.error_message
        i = info(core, dev)
        assert i["firmware"] == RUNNING and i["ota"]["state"] == "ok"
        m = vb.mark()
        vb.reset()                                 # the old firmware still boots
        vb.wait_log(lw.ACCEPTED, 30, m)
        assert info(core, dev)["firmware"] == RUNNING
    finally:
        vb.stop()
