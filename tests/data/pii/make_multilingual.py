"""Writes multilingual.jsonl: {"lang", "text", "spans"} in English, German, French, Spanish and
Chinese, hand-written (no randomness). Run: `.venv/bin/python tests/data/pii/make_multilingual.py`.

Positives are phone numbers as each country writes them (national and E.164, with the separators
people use) and e-mails; hard negatives are the numbers a text in that language is full of (years,
prices with its decimal marks, versions, dates, postcodes, order and invoice numbers). The numbers
sit in fictional or documentation ranges where a country has them (UK 020 7946 0xxx, US 555-01xx);
none is known to belong to a person.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ex(lang: str, *parts: str | tuple[str, str]) -> dict:
    text, spans = "", []
    for part in parts:
        if isinstance(part, tuple):
            kind, value = part
            spans.append({"start": len(text), "end": len(text) + len(value), "kind": kind})
            text += value
        else:
            text += part
    return {"lang": lang, "text": text, "spans": spans}


def phone(value: str) -> tuple[str, str]:
    return ("phone", value)


POSITIVES = [
    # English (US, UK)
    ex("en", "Call the front desk at ", phone("(415) 555-0132"), " before noon."),
    ex("en", "Our US line is ", phone("+1 415 555 0132"), "."),
    ex("en", "The London office answers on ", phone("020 7946 0958"), " weekdays."),
    ex("en", "From abroad dial ", phone("+44 20 7946 0958"), " instead."),
    ex("en", "Text ", phone("07911 123456"), " for the code."),
    ex("en", "Write to ", ("email", "help.desk@example.co.uk"), " or ring ", phone("212-555-0175")),
    ex("en", "Berlin partners: ", phone("+49 30 12345678"), ", ask for Anna."),
    # German
    ex("de", "Rufen Sie uns an: ", phone("+49 30 12345678"), " oder ", phone("030 1234567"), "."),
    ex("de", "Telefon ", phone("089 12345678"), ", Fax ", phone("089 12345679"), "."),
    ex("de", "Tel.: ", phone("+49 (0)89 1234567"), " (Zentrale)"),
    ex("de", "Mobil erreichbar unter ", phone("0151 23456789"), " ab 9 Uhr."),
    ex("de", "Hamburg: ", phone("040/123456"), ", München: ", phone("089/2345678"), "."),
    ex("de", "Schreiben Sie an ", ("email", "max.mustermann@beispiel.de"), "."),
    ex("de", "Aus Frankreich: ", phone("+33 1 42 68 53 00"), "."),
    ex("de", "Notfallnummer der Praxis ", phone("0221 9876543"), "."),
    # French
    ex("fr", "Appelez le ", phone("01 42 68 53 00"), " ou le ", phone("+33 1 42 68 53 00"), "."),
    ex("fr", "Portable : ", phone("06 12 34 56 78"), "."),
    ex("fr", "Depuis l'étranger : ", phone("+33 6 12 34 56 78"), " (SMS)."),
    ex(
        "fr", "Standard : ", phone("04.78.12.34.56"), ", courriel ", ("email", "contact@exemple.fr")
    ),
    ex("fr", "Le bureau de Madrid répond au ", phone("+34 912 345 678"), "."),
    ex("fr", "Service client au ", phone("09 70 80 90 10"), " du lundi au vendredi."),
    # Spanish
    ex("es", "Llame al ", phone("912 345 678"), " o al ", phone("+34 912 345 678"), "."),
    ex("es", "Móvil: ", phone("612 345 678"), ", también por WhatsApp."),
    ex("es", "Desde fuera de España: ", phone("+34 612 34 56 78"), "."),
    ex(
        "es",
        "Oficina de Barcelona ",
        phone("93 123 45 67"),
        ", correo ",
        ("email", "info@ejemplo.es"),
    ),
    ex("es", "Atención al cliente en el ", phone("954 12 34 56"), "."),
    ex("es", "Nuestra sede alemana: ", phone("+49 30 12345678"), "."),
    # Chinese
    ex("zh", "我的手机号是", phone("13800138000"), "，谢谢。"),
    ex("zh", "联系电话：", phone("+86 138 0013 8000"), "（工作日）"),
    ex("zh", "办公室电话 ", phone("010-62751234"), "，传真 ", phone("0755-86013388"), "。"),
    ex(
        "zh",
        "上海分公司 ",
        phone("021-63215678"),
        "，邮箱 ",
        ("email", "shanghai@example.cn"),
        "。",
    ),
    ex("zh", "德国办事处电话 ", phone("+49 30 12345678"), "。"),
    ex("zh", "客服热线", phone("15912345678"), "全天服务。"),
]

NEGATIVES = [
    # English
    ex("en", "In 2024 the price rose to $1,299.99 from $999."),
    ex("en", "Upgrade to version 10.0.19041.1 before 2025-01-15."),
    ex("en", "Order #123456789 shipped on 12/03/2024 to zip 94105."),
    ex("en", "ISBN 978-0-306-40615-7, 352 pages, first printed 1998."),
    ex("en", "The population grew from 8,336,817 to 8,804,190 between 2010 and 2020."),
    ex("en", "Invoice 2024-000123 totals 1,234,567.00 USD."),
    ex("en", 'Example:\n\ttlmm: pinctrl@3100000 {\n\t\tcompatible = "qcom,sdm660";'),
    ex("en", "The largest 32-bit signed integer is 2147483647, the next one wraps."),
    # German
    ex("de", "Im Jahr 2023 kostete es 19,99 EUR, heute 1.299,00 €."),
    ex("de", "Version 2.4.1 erschien am 12.03.2024."),
    ex("de", "PLZ 10115 Berlin, Bestellnummer 4711-0815."),
    ex("de", "Die Stadt hatte 1.234.567 Einwohner (Stand 31.12.2022)."),
    ex("de", "Rechnung Nr. 2024-004711 über 12.345,67 Euro."),
    ex("de", "Zwischen 1914 und 1918 fielen 2.037.000 Soldaten."),
    # French
    ex("fr", "Le prix passe de 999 € à 1 299 € en 2024."),
    ex("fr", "La version 3.2.1 est sortie le 14/07/2024."),
    ex("fr", "Code postal 75008, Paris ; commande n° 2024-56789."),
    ex("fr", "La commune compte 2 165 423 habitants (recensement de 2020)."),
    ex("fr", "Facture 00045678 du 03.02.2024, montant 12 345,67 €."),
    # Spanish
    ex("es", "El precio subió de 999 € a 1.299 € en el año 2024."),
    ex("es", "La versión 4.1.2 salió el 15/08/2024."),
    ex("es", "Código postal 28013 Madrid, pedido número 2024-000345."),
    ex("es", "La ciudad tenía 3.305.408 habitantes en 2022."),
    ex("es", "Factura 2024/00123 por 12.345,67 euros."),
    # Chinese
    ex("zh", "2024年的价格是1299元，比2023年贵了100元。"),
    ex("zh", "软件版本号 3.2.1.0 于2024-03-15发布。"),
    ex("zh", "订单号 202403150001 已发货，邮编 100871。"),
    ex("zh", "全市人口 21893095 人（2020年）。"),
    ex("zh", "发票号码 04403210 金额 12345.67 元。"),
    ex("zh", "将秒数转换为日期：$ date --date='@2147483647'"),
]


def main() -> None:
    rows = POSITIVES + NEGATIVES
    with (HERE / "multilingual.jsonl").open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(POSITIVES)} with PII, {len(NEGATIVES)} hard negatives")


if __name__ == "__main__":
    main()
