"""Writes labelled.jsonl: text + PII spans (start, end, kind), deterministic (seeded).

Run: `.venv/bin/python tests/data/pii/make_labelled.py`. Positives cover every kind in the formats
real text uses; hard negatives are the look-alikes (versions, dates, order numbers, hashes, times,
IDs and card numbers with bad checksums). Checksummed numbers are generated, never real ones.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
RNG = random.Random(20240315)
WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def cn_id(valid: bool = True) -> str:
    region = RNG.choice(["110101", "310104", "440305", "510107", "330106", "420111"])
    birth = f"{RNG.randint(1950, 2005)}{RNG.randint(1, 12):02d}{RNG.randint(1, 28):02d}"
    body = f"{region}{birth}{RNG.randint(0, 999):03d}"
    check = "10X98765432"[sum(int(d) * w for d, w in zip(body, WEIGHTS, strict=True)) % 11]
    if not valid:
        check = RNG.choice([c for c in "0123456789X" if c != check])
    return body + check


def luhn_complete(prefix: str, length: int, valid: bool = True) -> str:
    body = prefix + "".join(str(RNG.randint(0, 9)) for _ in range(length - len(prefix) - 1))
    for check in "0123456789":
        digits = body + check
        total = 0
        for i, ch in enumerate(reversed(digits)):
            v = int(ch) * (2 if i % 2 else 1)
            total += v - 9 if v > 9 else v
        if (total % 10 == 0) == valid:
            return digits
    raise AssertionError("unreachable")


def grouped(number: str, groups: tuple[int, ...], sep: str) -> str:
    out, i = [], 0
    for g in groups:
        out.append(number[i : i + g])
        i += g
    return sep.join(out)


def example(*parts: str | tuple[str, str]) -> dict:
    text, spans = "", []
    for part in parts:
        if isinstance(part, tuple):
            kind, value = part
            spans.append({"start": len(text), "end": len(text) + len(value), "kind": kind})
            text += value
        else:
            text += part
    return {"text": text, "spans": spans}


def positives() -> list[dict]:
    ex = example
    rows = [
        ex("Contact ", ("email", "jane.doe@example.com"), " for details."),
        ex("Send the logs to ", ("email", "ops-team+alerts@mail.example.org"), "."),
        ex("请发送邮件至 ", ("email", "zhang_san@163.com"), " 联系我们。"),
        ex("From: Li Wei <", ("email", "li.wei@cs.tsinghua.edu.cn"), ">"),
        ex("Reviewer: ", ("email", "BOB.SMITH@Example.CO.UK"), ", second round."),
        ex("Maintainer ", ("email", "debian-devel@lists.debian.org"), " (mailing list)"),
        ex("报名邮箱：", ("email", "signup2024@qq.com"), "，截止日期三月底。"),
        ex(
            "cc ", ("email", "a.b-c_d@sub.domain-name.io"), " and ", ("email", "x@y.dev"), " please"
        ),
        ex("Call me on ", ("phone", "13800138000"), " after six."),
        ex("联系电话：", ("phone", "+86 138 0013 8000"), "（工作日）"),
        ex("手机：", ("phone", "139-1234-5678"), "，微信同号。"),
        ex("客服热线 ", ("phone", "15912345678"), "。"),
        ex(
            "我的电话是",
            ("phone", "13912345678"),
            "，邮箱是",
            ("email", "wang.fang@sina.com"),
            "。",
        ),
        ex("服务器地址为", ("ipv4", "61.135.169.125"), "，端口443。"),
        ex("Phone: ", ("phone", "(415) 555-0132"), " ext. 12"),
        ex("Reach the office at ", ("phone", "415-555-0198"), " or by mail."),
        ex("US line ", ("phone", "+1 415 555 0132"), "."),
        ex("Fax ", ("phone", "212.555.0175"), " is out of order."),
        ex("London office: ", ("phone", "+44 20 7946 0958"), "."),
        ex("Berlin: ", ("phone", "+49 30 901820"), ", Paris: ", ("phone", "+33 1 42 68 53 00")),
        ex("办公室电话 ", ("phone", "010-62751234"), "，传真 ", ("phone", "0755-86013388"), "。"),
        ex("Tel. ", ("phone", "+86-10-6275-1234"), " (Beijing)"),
        ex("The gateway is ", ("ipv4", "192.168.1.20"), " on the lab network."),
        ex("ping ", ("ipv4", "8.8.8.8"), " to test DNS"),
        ex("server at ", ("ipv4", "203.0.113.45"), ":8080 refused the connection"),
        ex("Blocked ", ("ipv4", "10.0.0.1"), " and ", ("ipv4", "172.16.254.3"), " yesterday."),
        ex("来自 ", ("ipv4", "114.114.114.114"), " 的请求被拒绝。"),
        ex("Host ", ("ipv6", "2001:db8::1"), " answered."),
        ex("link-local ", ("ipv6", "fe80::1ff:fe23:4567:890a"), " on eth0"),
        ex("addr ", ("ipv6", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"), " assigned"),
        ex("mapped ", ("ipv6", "::ffff:192.0.2.128"), " is IPv4 in IPv6"),
        ex("route via ", ("ipv6", "2400:cb00:2048:1::c629:d7a2"), "."),
    ]
    for i in range(14):
        number = cn_id()
        if i % 2:
            rows.append(ex("身份证号：", ("cn_id", number), "，请核对。"))
        else:
            rows.append(ex("ID number ", ("cn_id", number), " was on the form."))
    cards = [
        ("4", 16, (4, 4, 4, 4)),
        ("51", 16, (4, 4, 4, 4)),
        ("55", 16, (4, 4, 4, 4)),
        ("37", 15, (4, 6, 5)),
        ("34", 15, (4, 6, 5)),
        ("62", 16, (4, 4, 4, 4)),
        ("6011", 16, (4, 4, 4, 4)),
        ("2221", 16, (4, 4, 4, 4)),
        ("35", 16, (4, 4, 4, 4)),
        ("62", 19, (4, 4, 4, 4, 3)),
    ]
    for i, (prefix, length, groups) in enumerate(cards * 2):
        number = luhn_complete(prefix, length)
        sep = ["", " ", "-"][i % 3]
        shown = grouped(number, groups, sep) if sep else number
        rows.append(ex("Card ", ("card", shown), " expires 04/27."))
    rows.append(
        ex(
            "Mail ",
            ("email", "liu@example.cn"),
            " or call ",
            ("phone", "18612345678"),
            " from ",
            ("ipv4", "202.112.0.36"),
            ".",
        )
    )
    return rows


def negatives() -> list[dict]:
    texts = [
        "Upgrade to version 2.4.1.3 today.",
        "Linux 5.10.0.8 kernel is required.",
        "Released v1.2.3.4 with fixes.",
        "Python 3.11.7 and numpy 2.4.6 are installed.",
        "Windows build 10.0.19041.1 shipped.",
        "See section 1.2.3.4.5 of the spec.",
        "The meeting is on 2024-03-15 at 10:30:00.",
        "Dated 15.03.2024 and signed.",
        "Fiscal year 2023.12.01 closes.",
        "Timestamps 12:30:45 and 23:59:59 logged.",
        "Mix the ratio 3:2:1 by volume.",
        "Order #1234567890123 has shipped.",
        "Invoice 2024031500123 is paid.",
        "Tracking number 9400111899223344556677.",
        "The population was 1,411,750,000 in 2022.",
        "pi = 3.14159265358979 roughly",
        "ISBN 978-3-16-148410-0 is printed on the back.",
        "Coordinates 39.9042, 116.4074.",
        "Listen on port 8080 and 8443.",
        "Use the @decorator syntax for foo@bar.",
        "Login as user@localhost for testing.",
        "Commit 3f2a9c1e7b4d fixed it.",
        "The value dead:beef is not an address.",
        "std::vector<int> and a::b::c are C++.",
        "MAC 00:1a:2b:3c:4d:5e belongs to the NIC.",
        "Hash 9f86d081884c7d659a2feaa0c55ad015.",
        "订单号：20240315123456789，请保存。",
        "邮编 100871，北京市海淀区。",
        "学号 2021012345 的同学请到办公室。",
        "版本号 3.2.1.0 已经发布。",
        "Matrix size 1024 x 768 x 3.",
        "Serial 00000000000000000 is unset.",
        "The test ran 1234 5678 iterations.",
        "UUID 123e4567-e89b-12d3-a456-426614174000.",
        "Reference 4111-11-1111-1111 is a ticket number.",
        "Room 101-2020-3030 in block C.",
        "Account balance: 12,345,678.90 yuan.",
        "Score 98.6.3.2 is a typo.",
        "The years 1999-2003 and 2010-2015 saw growth.",
        "Call extension 4412 internally.",
        "File sizes 4096 8192 16384 32768 65536 bytes.",
        "Chapter 12.3.4 explains it.",
        "Equation x = 2001:5 hours.",
        "Version 10.1.1.1 of the router firmware.",
        "ratio 13:2 in the mix",
        "Zip code 94103-1234 in San Francisco.",
        "Dial 110 or 120 in an emergency.",
        "The 100.0% coverage report.",
    ]
    rows = [{"text": t, "spans": []} for t in texts]
    for i in range(8):
        rows.append(
            {
                "text": f"身份证号 {cn_id(valid=False)} 校验失败。"
                if i % 2
                else f"ID {cn_id(valid=False)} failed validation.",
                "spans": [],
            }
        )
    for prefix, length in [
        ("4", 16),
        ("51", 16),
        ("37", 15),
        ("62", 16),
        ("6011", 16),
        ("4", 16),
        ("55", 16),
        ("35", 16),
    ]:
        number = luhn_complete(prefix, length, valid=False)
        rows.append(
            {
                "text": f"Card {grouped(number, (4, 4, 4, 4), ' ')} was declined as invalid."
                if length == 16
                else f"Number {number} is invalid.",
                "spans": [],
            }
        )
    return rows


def main() -> None:
    rows = positives() + negatives()
    with open(HERE / "labelled.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for row in rows:
        for span in row["spans"]:
            kinds[span["kind"]] = kinds.get(span["kind"], 0) + 1
    print(len(rows), "examples;", sum(not r["spans"] for r in rows), "negatives;", kinds)


if __name__ == "__main__":
    main()
