"""Byte-serial CRC-16/CCITT-FALSE: one byte per cycle.

The reference is :func:`lowbit.sim.link.crc16` (polynomial 0x1021, initial value 0xFFFF, no
reflection,
no final XOR; CRC of ``b"123456789"`` is 0x29B1).
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CRC16", "crc16_next"]

POLY = 0x1021
INIT = 0xFFFF


def crc16_next(crc, byte):
    """Amaranth expression: the CRC register after shifting in ``byte`` (MSB first).

    ``crc`` is a 16-bit value, ``byte`` an 8-bit value. Built as eight unrolled shift steps,
    which synthesis reduces to the XOR network of the CRC's 24x16 update matrix.
    """
    bits = [crc[i] for i in range(16)]
    for k in range(8):
        fb = bits[15] ^ byte[7 - k]
        shifted = [0] + bits[:15]
        bits = [shifted[i] ^ fb if POLY >> i & 1 else shifted[i] for i in range(16)]
        bits[0] = fb
    return Cat(*bits)


class CRC16(wiring.Component):
    """CRC-16/CCITT-FALSE over a byte stream, one byte per cycle.

    Members
    -------
    clear : In(1)
        Restart: the register becomes 0xFFFF on the next cycle (``clear`` wins over ``en``).
    en : In(1)
        Shift ``data`` in on this cycle.
    data : In(8)
        The byte.
    crc : Out(16)
        The CRC of the bytes shifted in since the last ``clear`` (registered).
    """
    clear: In(1)
    en: In(1)
    data: In(8)
    crc: Out(16, init=INIT)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.clear):
            m.d.sync += self.crc.eq(INIT)
        with m.Elif(self.en):
            m.d.sync += self.crc.eq(crc16_next(self.crc, self.data))
        return m

