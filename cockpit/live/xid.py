"""Xid errors: what each code the NVIDIA driver reports means, and whose fault it is.

A renter claims paid hours back for the GPU's faults, not for their own program's: each code gets
a short meaning and a class, `hardware` (the GPU, its memory, its bus, NVLink, or the driver and
firmware that run it: the provider's side) or `application` (the program's own fault: a bad
memory access, an illegal instruction). Codes not in the table are `unknown`: shown, and alerted
on as a possible hardware fault, with a pointer to NVIDIA's Xid catalogue.
Sources: NVIDIA's "Xid Errors" catalogue and its GPU debug guidelines (r555 and later)."""

from __future__ import annotations

from dataclasses import dataclass

HARDWARE = "hardware"
APPLICATION = "application"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    meaning: str
    cls: str  # hardware | application | unknown

    @property
    def hardware(self) -> bool:
        return self.cls == HARDWARE

    def describe(self) -> str:
        owner = {
            HARDWARE: "a hardware or driver fault (the provider's side)",
            APPLICATION: "the application's own fault",
            UNKNOWN: "not in the cockpit's table: look it up in NVIDIA's Xid catalogue",
        }[self.cls]
        return f"Xid {self.code} ({self.meaning}): {owner}"


_TABLE: dict[int, tuple[str, str]] = {
    # the application's own faults: a program error the driver caught
    13: ("graphics engine exception: an illegal address or instruction in a kernel", APPLICATION),
    31: ("GPU memory page fault: the program touched memory it does not own", APPLICATION),
    43: ("GPU stopped processing: the program's context was torn down after a fault", APPLICATION),
    45: ("preemptive cleanup after an earlier error or a killed process", APPLICATION),
    68: ("video processor exception", APPLICATION),
    # the GPU, its memory, its bus, its links, its firmware and driver
    8: ("GPU stopped processing (timeout)", HARDWARE),
    32: ("invalid or corrupted push buffer stream (the PCI bus or system memory)", HARDWARE),
    38: ("driver firmware error", HARDWARE),
    48: ("double-bit ECC error: uncorrectable GPU memory error", HARDWARE),
    54: ("auxiliary power is not connected to the GPU", HARDWARE),
    56: ("display engine error", HARDWARE),
    57: ("error programming video memory interface", HARDWARE),
    58: ("unstable video memory interface detected", HARDWARE),
    61: ("internal micro-controller breakpoint or warning", HARDWARE),
    62: ("internal micro-controller halt", HARDWARE),
    63: ("ECC page retirement or row remapping recorded", HARDWARE),
    64: ("ECC page retirement or row remapping failed", HARDWARE),
    69: ("graphics engine class error", HARDWARE),
    74: ("NVLink error", HARDWARE),
    79: ("GPU has fallen off the bus", HARDWARE),
    92: ("high single-bit ECC error rate", HARDWARE),
    94: ("contained ECC error: an uncorrectable error the GPU contained", HARDWARE),
    95: ("uncontained ECC error: an uncorrectable error that affects every process on the GPU", HARDWARE),
    109: ("context switch timeout", HARDWARE),
    110: ("security fault error", HARDWARE),
    119: ("GSP RPC timeout: the GPU's system processor stopped answering", HARDWARE),
    120: ("GSP error: the GPU's system processor reported a fault", HARDWARE),
    121: ("C2C (chip-to-chip) link error", HARDWARE),
    122: ("SPI PMU RPC read failure", HARDWARE),
    123: ("SPI PMU RPC write failure", HARDWARE),
    140: ("unrecovered ECC error", HARDWARE),
    143: ("GPU initialisation failure", HARDWARE),
    149: ("NVLink Network Link-Reset needed", HARDWARE),
    154: ("GPU recovery action changed: a reset or reboot is needed", HARDWARE),
}


def xid_info(code: int) -> XidInfo:
    """The meaning and class of an Xid code; an unknown code is said to be unknown."""
    meaning, cls = _TABLE.get(code, ("not in the cockpit's table", UNKNOWN))
    return XidInfo(code, meaning, cls)


def known_codes() -> tuple[int, ...]:
    return tuple(sorted(_TABLE))
