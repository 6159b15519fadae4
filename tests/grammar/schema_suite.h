// The property tests' JSON Schema suite (tests only): 50+ schemas over the supported subset.
// Strings mostly carry maxLength so that a random-logits "model" (which closes a quote rarely:
// a quote is 1 of ~4k tokens) finishes within the token budget; a few leave strings unbounded.
#pragma once

#include <vector>

namespace kvw::grammar {

inline const std::vector<const char*>& schema_suite() {
  static const std::vector<const char*> suite = {
      // scalars
      R"({"type":"integer"})",
      R"({"type":"number"})",
      R"({"type":"boolean"})",
      R"({"type":"null"})",
      R"({"type":"string","maxLength":6})",
      R"({"type":"string","minLength":3,"maxLength":5})",
      R"({"type":["integer","null"]})",
      R"({"type":["string","boolean"],"maxLength":4})",
      R"({"enum":["red","green","blue"]})",
      R"({"enum":[1,2.5,"x",null,true,{"k":[1]}]})",
      R"({"const":"fixed \"value\""})",
      R"({"type":"integer","nullable":true})",
      // flat objects
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["a","b"],"additionalProperties":false})",
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"null"}}})",
      R"({"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["y"]})",
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false})",
      R"({"type":"object","properties":{"p1":{"type":"boolean"},"p2":{"type":"boolean"},"p3":{"type":"boolean"},"p4":{"type":"boolean"},"p5":{"type":"boolean"}},"required":["p3"]})",
      R"({"type":"object","properties":{"status":{"enum":["ok","error"]},"code":{"type":"integer"}},"required":["status"]})",
      R"({"type":"object","properties":{"k":{"const":42}},"required":["k"]})",
      R"({"type":"object","properties":{"quote\"d key":{"type":"boolean"},"ünï":{"type":"null"}},"required":["quote\"d key","ünï"]})",
      R"({"type":"object","additionalProperties":false})",
      R"({"type":"object","properties":{}})",
      R"({"type":"object","properties":{"opt":{"type":"string","maxLength":3}}})",
      // arrays
      R"({"type":"array","items":{"type":"integer"}})",
      R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":4})",
      R"({"type":"array","items":{"type":"null"},"maxItems":0})",
      R"({"type":"array","items":{"enum":["a","b"]},"minItems":1})",
      R"({"type":"array","items":{"type":"array","items":{"type":"integer"},"maxItems":2},"maxItems":3})",
      R"({"type":"array","items":{"type":"string","maxLength":2},"minItems":3,"maxItems":3})",
      R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]},"maxItems":3})",
      R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"null"}]},"maxItems":5})",
      // nested objects
      R"({"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer"},"admin":{"type":"boolean"}},"required":["id"]}},"required":["user"]})",
      R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"integer"}},"required":["c"]}},"required":["b"]}},"required":["a"]})",
      R"({"type":"object","properties":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"],"additionalProperties":false},"label":{"type":"string","maxLength":5}},"required":["point"]})",
      R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3},"count":{"type":"integer"}},"required":["tags","count"]})",
      R"({"type":"object","properties":{"matrix":{"type":"array","items":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2},"minItems":2,"maxItems":2}},"required":["matrix"]})",
      R"({"type":"object","properties":{"meta":{"type":"object"}},"required":["meta"]})",
      R"({"type":"object","properties":{"any":{}},"required":["any"]})",
      // anyOf / oneOf
      R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":3}]})",
      R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"n":{"type":"integer"}},"required":["kind","n"]},{"type":"object","properties":{"kind":{"const":"b"},"ok":{"type":"boolean"}},"required":["kind","ok"]}]})",
      R"({"type":"object","properties":{"v":{"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"array","items":{"type":"integer"},"maxItems":2}]}},"required":["v"]})",
      R"({"anyOf":[{"enum":["x","y"]},{"type":"number"}]})",
      // $ref
      R"({"$defs":{"id":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/id"},"b":{"$ref":"#/$defs/id"}},"required":["a","b"]})",
      R"({"definitions":{"flag":{"enum":[true,false,null]}},"type":"array","items":{"$ref":"#/definitions/flag"},"maxItems":4})",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})",
      R"({"$defs":{"tree":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/tree"},"maxItems":2}},"required":["kids"]}},"$ref":"#/$defs/tree"})",
      R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"type":"object","properties":{"from":{"$ref":"#/$defs/pt"},"to":{"$ref":"#/$defs/pt"}},"required":["from","to"]})",
      // unbounded strings and realistic shapes
      R"({"type":"string"})",
      R"({"type":"object","properties":{"title":{"type":"string"}},"required":["title"]})",
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":10},"temp_c":{"type":"number"},"unit":{"enum":["C","F"]},"sunny":{"type":"boolean"}},"required":["city","temp_c","unit"],"additionalProperties":false})",
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"arguments":{"type":"object","properties":{"q":{"type":"string","maxLength":6},"limit":{"type":"integer"}},"required":["q"]}},"required":["name","arguments"]})",
      R"({"title":"T","description":"d","type":"object","properties":{"a":{"type":"integer","description":"x","default":1}},"required":["a"]})",
      R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":4},"qty":{"type":"integer"}},"required":["sku","qty"],"additionalProperties":false},"minItems":1,"maxItems":2}},"required":["items"]})",
      R"({})",
      R"(true)",
  };
  return suite;
}

}  // namespace kvw::grammar
