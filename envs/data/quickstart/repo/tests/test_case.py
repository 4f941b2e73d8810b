from textkit import camel_case, kebab_case, snake_case


def test_snake_from_camel():
    assert snake_case("parseHttpResponse") == "parse_http_response"


def test_snake_keeps_acronyms_together():
    assert snake_case("parseHTTPResponse") == "parse_http_response"
    assert snake_case("HTMLParser") == "html_parser"


def test_snake_from_phrase():
    assert snake_case("Hello big World 2") == "hello_big_world_2"


def test_kebab():
    assert kebab_case("parseHTTPResponse") == "parse-http-response"


def test_camel():
    assert camel_case("parse_http_response") == "parseHttpResponse"
    assert camel_case("") == ""
