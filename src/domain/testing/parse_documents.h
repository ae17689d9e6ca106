#pragma once

#include <string>
#include <vector>

#include "domain/documents.h"

// What the domain's tests read documents with: every document of a YAML stream, validated, with
// the syntax errors and the validation errors in one list (as the server reports them).
namespace meridian::domain::testing {

inline std::vector<Document> ParseDocuments(const std::string& text, const std::string& file,
                                            ErrorList* errors) {
  std::vector<FieldError> syntax;
  auto docs = ParseYamlDocuments(text, file, &syntax);
  for (const FieldError& e : syntax) errors->Add(e);
  std::vector<Document> out;
  if (!docs.ok()) return out;
  for (const SourceDoc& d : *docs) {
    if (auto v = ValidateDocument(d, errors)) out.push_back(*v);
  }
  return out;
}

}  // namespace meridian::domain::testing
