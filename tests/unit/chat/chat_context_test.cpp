// The render context and the renderer the API routes call: variables built
// as transformers' apply_chat_template builds them, the Jinja template or the
// ERNIE 4.5 fallback chosen by whether the model has a template.
#include "chat/chat_context.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "jinja/json.h"
#include "jinja/template.h"
#include "support/tokenizer_fixture.h"

namespace tern {
namespace {

TEST(ChatContext, BuiltLikeTransformers) {
  auto messages = jinja_from_json(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"));
  ASSERT_TRUE(messages.is_ok());
  ChatTemplateInputs in;
  in.messages = messages.value();
  in.add_generation_prompt = true;
  in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto kwargs = jinja_from_json(nlohmann::ordered_json::parse(R"({"eos_token": "<E>", "flag": 3})"));
  in.chat_template_kwargs = kwargs.value();
  auto ctx = make_chat_context(in);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
  auto tmpl = JinjaTemplate::compile(
      "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ flag }}{{ tools is none }}{{ documents is none }}"
      "{{ add_generation_prompt }}");
  ASSERT_TRUE(tmpl.is_ok());
  auto out = tmpl->render(ctx.value());
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), "<s>hi<E>3TrueTrueTrue");

  in.chat_template_kwargs = jinja_from_json(nlohmann::ordered_json::parse(R"({"messages": []})")).value();
  EXPECT_EQ(make_chat_context(in).status().code(), ErrorCode::kInvalidArgument);
}

class ChatRendererTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &testing::fixture_tokenizer(); }
  static const Tokenizer* tok_;
};
const Tokenizer* ChatRendererTest::tok_ = nullptr;

TEST_F(ChatRendererTest, NoTemplateGivesTheErnieFormat) {
  auto r = make_chat_renderer("", *tok_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto messages = nlohmann::json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  auto out = r.value()(messages, true, nlohmann::json());
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), tok_->cls_token() + "S\nUser: U\nAssistant: ");
  // Content that is not a string is refused, not thrown on.
  out = r.value()(nlohmann::json::parse(R"([{"role": "user", "content": [1]}])"), true, nlohmann::json());
  EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(ChatRendererTest, TemplateSeesSpecialTokensAndKwargs) {
  auto r = make_chat_renderer("{{ bos_token }}|{% for m in messages %}{{ m.content }}{% endfor %}|{{ who }}"
                              "{% if add_generation_prompt %}>{% endif %}",
                              *tok_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto out = r.value()(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), true,
                       nlohmann::json::parse(R"({"who": "me"})"));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), tok_->bos_token() + "|hi|me>");
}

TEST_F(ChatRendererTest, CompileErrorsNameTheChatTemplate) {
  auto r = make_chat_renderer("{% if %}", *tok_);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("chat template"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace tern
