// The replies of /compare side by side: one column per model (app/conversation/compare.py sends the props
// again while they stream). Plain text with its line breaks: a reply's Markdown shows as typed,
// and the message's own text holds it rendered (public/chat.css hides it beside the columns).
export default function CompareColumns() {
  const columns = props.columns || [];
  return (
    <div className="compare-columns">
      {columns.map((column, i) => (
        <section key={i} className="compare-column" data-model={column.model} data-state={column.state}>
          <header className="compare-model">{column.model}</header>
          <div className="compare-text">{column.text}</div>
          {column.note ? <div className="compare-note">{column.note}</div> : null}
          {column.figures ? <div className="compare-figures">⏱ {column.figures}</div> : null}
        </section>
      ))}
    </div>
  );
}
