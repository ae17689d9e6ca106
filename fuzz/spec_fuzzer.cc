// libFuzzer target: configuration and job documents as `meridian apply` and `meridian submit -f`
// read them. Any input must end in documents or in errors with a position, never in a crash,
// a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "domain/documents.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<meridian::domain::FieldError> syntax;
  auto docs = meridian::domain::ParseYamlDocuments(text, "fuzz.yaml", &syntax);
  if (!docs.ok()) return 0;
  meridian::domain::ErrorList errors;
  std::vector<meridian::domain::Document> valid;
  for (const meridian::domain::SourceDoc& d : *docs) {
    if (auto v = meridian::domain::ValidateDocument(d, &errors)) valid.push_back(*v);
    meridian::domain::ErrorList job_errors;
    (void)meridian::domain::ValidateJobDocument(d, &job_errors);
    (void)job_errors.ToString();
  }
  meridian::domain::ValidateDesiredState(valid, &errors);
  (void)errors.ToString();
  return 0;
}
