# frozen_string_literal: true

# A Ruby heap shaped like a booted application's rather than a bag of strings: classes with constants
# and methods (method entries, iseqs, blocks, inline caches, method and constant tables), called once
# so that their caches fill, and the data such an app keeps (strings and hashes). The specs and
# `rake bench` (bench/pause_bench.rb) build it in a process of its own.
module AppHeap
  module_function

  # Defines `classes` classes (AppHeap::Model0 ...) of `methods` methods each, every method with a
  # block, an instance variable and a constant, each class from a file name of its own, and keeps
  # `records` strings and as many hashes. Returns what must stay referenced.
  def build(classes:, methods:, records:)
    Array.new(classes) { |i| define_class(i, methods) }.each { |klass| exercise(klass, methods) }
    strings = Array.new(records) { |i| "record #{i} " * (1 + i % 5) }
    hashes = Array.new(records) { |i| { id: i, name: "n#{i}", tags: [i, i + 1] } }
    [strings, hashes]
  end

  def define_class(index, methods)
    source = +"class Model#{index}\n  TABLE = 'model_#{index}'\n"
    methods.times do |m|
      source << "  def action_#{m}(a, b = 1)\n    v = [a, b].map { |x| x.to_s + TABLE }\n    " \
                "@cache ||= {}\n    @cache[a] = v.join(',')\n  end\n"
    end
    source << "end\n"
    module_eval(source, "app/models/model_#{index}.rb", 1)
    const_get("Model#{index}")
  end

  def exercise(klass, methods)
    object = klass.new
    methods.times { |m| object.public_send("action_#{m}", m) }
  end
end
